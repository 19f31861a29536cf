"""``serve``: migrates, runs the API, and owns its embedded worker's lifetime."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from tests.service.conftest import database, start_service


def worker_children(api: psutil.Process) -> list[psutil.Process]:
    """The API's worker processes (it also runs the extraction forkserver)."""
    return [p for p in api.children() if "convtune.service.worker" in " ".join(p.cmdline())]


def wait_gone(process: psutil.Process, timeout: float) -> bool:
    try:
        process.wait(timeout)
    except psutil.TimeoutExpired:
        return False
    return True


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_embedded_worker_stops_with_the_api(tmp_path, how):
    with database("sqlite", tmp_path) as url:
        service = start_service(tmp_path, url, workers="1")
        try:
            api = psutil.Process(service.proc.process.pid)
            deadline = time.monotonic() + 30
            while not (workers := worker_children(api)) and time.monotonic() < deadline:
                time.sleep(0.1)
            [worker] = workers
            # Its signal handlers are set once it polls (it shares the API's log).
            while "polling" not in service.proc.log() and time.monotonic() < deadline:
                time.sleep(0.1)
            os.kill(api.pid, how)
            assert wait_gone(worker, 30), "the worker outlived the API"
        finally:
            service.stop()
    if how == signal.SIGTERM:
        assert "worker exiting" in service.proc.log()
