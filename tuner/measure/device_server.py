"""``convtune rpc-server``: a measuring device of a fleet.

TVM's ``rpc.Server`` with ``TVM_NUM_THREADS`` pinned and two functions registered for sessions:
``convtune.peak`` (the FMA microbenchmark of ``tuner/measure/peak.py``, run on the device) and
``convtune.device_info``.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import socket

import tvm
import tvm_ffi
from tvm import rpc

from convtune.tuner.errors import ConvtuneError
from convtune.tuner.measure.fleet import parse_tracker
from convtune.tuner.measure.peak import measure_peak


def _register_device_functions(threads: int) -> None:
    """Runs in the RPC server before it listens; every session process inherits these."""

    @tvm_ffi.register_global_func("convtune.peak", override=True)
    def _peak() -> str:
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
