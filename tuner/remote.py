"""TVM RPC for fleets: the tracker's view, a device's session, and what convtune runs remotely.

- ``tracker_summary`` / ``request_device`` speak TVM's tracker protocol (``tvm.rpc.base``) with
  a short connect timeout: ``TrackerSession`` retries a dead tracker for 60 s, which would hang a
  dashboard page or a job for a minute; and ``request_device`` also returns the address the
  tracker handed out, which ``TrackerSession.request`` keeps to itself (trials record it).
- ``serve`` is ``convtune rpc-server``: TVM's ``rpc.Server`` with ``TVM_NUM_THREADS`` pinned and
  two functions registered for sessions: ``convtune.peak`` (the FMA microbenchmark of
  ``peak.py``, run on the device) and ``convtune.device_info``.
- ``measure_fleet_peak``, ``verify_on_fleet`` and ``FleetTimer`` (confirmation's rounds,
  ``confirm.py``) run on one device of a fleet.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import platform
import socket
import statistics
import struct
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import tvm
import tvm_ffi
from tvm import relax, rpc
from tvm.rpc import base

from .confirm import BuiltCandidate, CandidateTimer, GroupTimes, rotating_rounds
from .errors import ConvtuneError, error_line
from .fleet import Fleet, FleetPeak, FleetUnavailable, parse_tracker
from .ingest import IngestedModel
from .verify import Verification, check_outputs, random_feeds

log = logging.getLogger(__name__)

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


def _register_device_functions(threads: int) -> None:
    """Runs in the RPC server before it listens; every session process inherits these."""

    @tvm_ffi.register_global_func("convtune.peak", override=True)
    def _peak() -> str:
        from .peak import measure_peak

        return json.dumps(measure_peak(threads).as_dict())

    @tvm_ffi.register_global_func("convtune.device_info", override=True)
    def _device_info() -> str:
        return json.dumps(
            {
                "hostname": socket.gethostname(),
                "machine": platform.machine(),
                "threads": int(tvm_ffi.get_global_func("runtime.NumThreads")()),
                "tvm": tvm.__version__,
            }
        )


def serve(
    tracker: str,
    key: str,
    *,
    threads: int,
    host: str = "0.0.0.0",
    port: int = 9090,
    port_end: int = 9199,
    custom_addr: str | None = None,
) -> None:
    """Run a measuring device until killed: TVM's RPC server registered at ``tracker`` under
    ``key``, every session measuring with ``threads`` threads.

    TVM's runtime otherwise sizes its pool as half the logical CPUs, so a device would measure
    with a thread count nobody chose; the variable is read when a session's pool starts, and every
    session is a fresh process forked from the server.
    """
    tracker_addr = parse_tracker(tracker)
    if threads < 1:
        raise ConvtuneError(f"--threads must be at least 1, got {threads}")
    os.environ["TVM_NUM_THREADS"] = str(threads)
    server = rpc.Server(
        host,
        port,
        port_end,
        key=key,
        tracker_addr=tracker_addr,
        custom_addr=custom_addr,
        silent=True,
        server_init_callback=functools.partial(_register_device_functions, threads),
    )
    print(
        f"convtune rpc-server: {host}:{server.port} key={key} tracker={tracker} threads={threads}"
    )
    server.proc.join()


def _convtune_function(session: rpc.RPCSession, name: str, device: str) -> Any:
    try:
        return session.get_function(name)
    except (AttributeError, RuntimeError, tvm.error.TVMError):
        raise ConvtuneError(
            f"device {device} has no {name}: start it with `convtune rpc-server`, "
            "not TVM's plain rpc_server"
        ) from None


def device_info(session: rpc.RPCSession, device: str) -> dict[str, Any]:
    """Host name, thread count in effect and TVM version of the device behind ``session``."""
    info: dict[str, Any] = json.loads(_convtune_function(session, "convtune.device_info", device)())
    return info


def measure_fleet_peak(fleet: Fleet, *, wait: float = 60.0) -> FleetPeak:
    """The fp32 FMA peak measured on one free device of the fleet, with its pinned threads."""
    session, device = request_device(fleet, session_timeout=120.0, wait=wait)
    peak = json.loads(_convtune_function(session, "convtune.peak", device)())
    return FleetPeak(
        gflops_per_core=float(peak["gflops_per_core"]),
        gflops_all=float(peak["gflops_all"]),
        threads=int(peak["threads"]),
        device=device,
        measured_at=datetime.now(UTC),
    )


def _outputs(value: Any) -> list[Any]:
    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    return [item for part in value for item in _outputs(part)]


def _run_remote(
    session: rpc.RPCSession, so_path: Path, ingested: IngestedModel, feeds: dict[str, Any]
) -> list[Any]:
    session.upload(str(so_path))
    library = session.load_module(so_path.name)
    remote_cpu = session.cpu(0)
    vm = relax.VirtualMachine(library, remote_cpu)
    # set_input/invoke_stateful: the calling convention the Relax VM supports over RPC.
    vm.set_input("main", *[tvm.runtime.tensor(feeds[s.name], remote_cpu) for s in ingested.inputs])
    vm.invoke_stateful("main")
    outputs = _outputs(vm.get_outputs("main"))
    session.remove(so_path.name)
    return outputs


def verify_on_fleet(
    so_path: Path,
    ingested: IngestedModel,
    fleet: Fleet,
    *,
    threads: int,
    seed: int = 0,
    wait: float = 120.0,
) -> tuple[Verification, str]:
    """Upload the artifact to a device of the fleet, run it there with the Relax VM over RPC on
    the seeded inputs, compare with onnxruntime here; raises ``VerificationError`` on mismatch.

    ``threads`` is onnxruntime's (local); the device runs with its own pinned count. A device
    that goes away meanwhile is replaced once by another of the fleet.
    """
    feeds = random_feeds(ingested.inputs, seed)
    for attempt in range(2):
        session, device = request_device(fleet, session_timeout=300.0, wait=wait)
        try:
            ours = _run_remote(session, so_path, ingested, feeds)
            break
        except Exception:
            if attempt or session_answers(session):
                raise
            log.warning("device %s went away while verifying; asking for another", device)
    result = check_outputs(
        ours, ingested, feeds, threads=threads, seed=seed, where=f" on fleet device {device}"
    )
    return result, device


class FleetTimer(CandidateTimer):
    """Confirmation's rounds on one device of the fleet: every group is timed on the same
    device, so the figures of a group compare (the search measured its candidates on whichever
    device was free). A device or tracker that fails is a ``ConvtuneError``: the build then
    takes the fastest trials."""

    def __init__(self, fleet: Fleet, *, wait: float = 300.0) -> None:
        self.fleet = fleet
        self.wait = wait

    def time_groups(self, groups: Sequence[Sequence[BuiltCandidate]], rounds: int) -> GroupTimes:
        from tvm.s_tir.meta_schedule.runner.rpc_runner import (
            default_alloc_argument,
            default_cleanup,
            default_run_evaluator,
            default_upload_module,
        )

        from .search import EVALUATOR

        # The server ends a session older than its timeout: give it every run, with room.
        session_timeout = 120.0 + 5.0 * rounds * sum(len(g) for g in groups)
        try:
            session, device = request_device(
                self.fleet, session_timeout=session_timeout, wait=self.wait
            )
        except DeviceLost as exc:
            raise ConvtuneError(f"fleet {self.fleet.name}: {exc}") from None
        self.device = device
        remote_cpu = session.cpu(0)
        uploaded: list[str] = []

        def load(library: str) -> Any:
            # Every candidate is "candidate.tar" in a directory of its own.
            remote = f"confirm-{len(uploaded)}-{os.path.basename(library)}"
            uploaded.append(remote)
            return default_upload_module(session, library, remote)

        try:
            return rotating_rounds(
                groups,
                rounds,
                load=load,
                alloc=lambda info: default_alloc_argument(session, remote_cpu, info, 1),
                run=lambda module, args: float(
                    statistics.mean(
                        default_run_evaluator(session, module, remote_cpu, EVALUATOR, args)
                    )
                ),
            )
        except Exception as exc:  # TVM raises RPC and kernel failures alike as TVMError
            raise ConvtuneError(
                f"confirm on device {device} of fleet {self.fleet.name}: {error_line(exc)}"
            ) from None
        finally:
            for remote in uploaded:
                # The device may be gone; its files went with its session then.
                with contextlib.suppress(Exception):
                    default_cleanup(session, remote)
