"""The RPC tracker's client: the fleet's devices, one device's session, and convtune's functions on
it.

``tracker_summary`` / ``request_device`` speak TVM's tracker protocol (``tvm.rpc.base``) with a
short connect timeout: ``TrackerSession`` retries a dead tracker for 60 s, which would hang a
dashboard page or a job for a minute; and ``request_device`` also returns the address the tracker
handed out, which ``TrackerSession.request`` keeps to itself (trials record it).
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

import tvm
from tvm import rpc
from tvm.rpc import base

from convtune.tuner.errors import ConvtuneError
from convtune.tuner.measure.fleet import Fleet, FleetUnavailable

CONNECT_TIMEOUT = 5.0


class DeviceLost(Exception):
    """The device the tracker handed out did not answer."""

    def __init__(self, device: str, cause: BaseException) -> None:
        super().__init__(f"device {device} did not answer: {cause}")
        self.device = device


def _tracker_socket(host: str, port: int, timeout: float = CONNECT_TIMEOUT) -> socket.socket:
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        magic = struct.unpack("<i", base.recvall(sock, 4))[0]
    except (OSError, RuntimeError) as exc:
        raise FleetUnavailable(f"RPC tracker {host}:{port} unreachable: {exc}") from None
    if magic != base.RPC_TRACKER_MAGIC:
        sock.close()
        raise FleetUnavailable(f"{host}:{port} is not a TVM RPC tracker")
    return sock


def tracker_summary(host: str, port: int, timeout: float = CONNECT_TIMEOUT) -> dict[str, Any]:
    """The tracker's ``summary()``: ``queue_info`` per key (free, pending) and ``server_info``."""
    sock = _tracker_socket(host, port, timeout)
    try:
        base.sendjson(sock, [base.TrackerCode.SUMMARY])
        value = base.recvjson(sock)
    except (OSError, RuntimeError) as exc:
        raise FleetUnavailable(f"RPC tracker {host}:{port} went away: {exc}") from None
    finally:
        sock.close()
    if value[0] != base.TrackerCode.SUCCESS:
        raise FleetUnavailable(f"RPC tracker {host}:{port} refused the summary: {value}")
    summary: dict[str, Any] = value[1]
    return summary


def fleet_devices(fleet: Fleet) -> list[str]:
    """Addresses (``ip:port``) of the devices registered under the fleet's key right now."""
    summary = tracker_summary(fleet.tracker_host, fleet.tracker_port)
    return sorted(
        f"{server['addr'][0]}:{server['addr'][1]}"
        for server in summary["server_info"]
        if server.get("key") == f"server:{fleet.key}"
    )


def request_device(
    fleet: Fleet, *, session_timeout: float, wait: float
) -> tuple[rpc.RPCSession, str]:
    """A session on a free device of the fleet (waiting up to ``wait`` s), and its address.

    ``FleetUnavailable`` when the tracker cannot be reached or no device frees up in time;
    ``DeviceLost`` when the device handed out does not answer.
    """
    sock = _tracker_socket(fleet.tracker_host, fleet.tracker_port)
    try:
        sock.settimeout(wait)
        base.sendjson(sock, [base.TrackerCode.REQUEST, fleet.key, "", 1])
        value = base.recvjson(sock)
    except TimeoutError:
        raise FleetUnavailable(
            f"no device of key {fleet.key!r} free at tracker {fleet.tracker} within {wait:.0f} s"
        ) from None
    except (OSError, RuntimeError) as exc:
        raise FleetUnavailable(f"RPC tracker {fleet.tracker} went away: {exc}") from None
    finally:
        sock.close()
    if value[0] != base.TrackerCode.SUCCESS:
        raise FleetUnavailable(f"RPC tracker {fleet.tracker} refused the request: {value}")
    url, port, matchkey = value[1]
    device = f"{url}:{port}"
    try:
        return rpc.connect(url, port, matchkey, session_timeout), device
    except (OSError, RuntimeError, tvm.error.TVMError) as exc:
        raise DeviceLost(device, exc) from None


def session_answers(session: rpc.RPCSession) -> bool:
    """Whether the device behind ``session`` still answers (after a failed call)."""
    try:
        session.get_function("runtime.NumThreads")()
        return True
    except Exception:  # Whatever the transport raises, the device is gone.
        return False


def convtune_function(session: rpc.RPCSession, name: str, device: str) -> Any:
    try:
        return session.get_function(name)
    except (AttributeError, RuntimeError, tvm.error.TVMError):
        raise ConvtuneError(
            f"device {device} has no {name}: start it with `convtune rpc-server`, "
            "not TVM's plain rpc_server"
        ) from None


def device_info(session: rpc.RPCSession, device: str) -> dict[str, Any]:
    """Host name, thread count in effect and TVM version of the device behind ``session``."""
    info: dict[str, Any] = json.loads(convtune_function(session, "convtune.device_info", device)())
    return info
