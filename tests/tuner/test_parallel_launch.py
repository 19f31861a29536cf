"""The work-sharing parallel launch: every task of a parallel loop runs exactly once."""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from convtune.tuner.measure import parallel_launch
from convtune.tuner.measure.runtime import load_library, set_threads
from convtune.tuner.target import make_target

ROWS, COLS = 61, 256  # rows no task count divides: the last task is shorter, some are empty


@T.prim_func
def _increment(a: T.Buffer((ROWS, COLS), "float32")):
    """Adds 1 in place: a task that runs twice leaves 2, one that never runs leaves 0."""
    T.func_attr({"global_symbol": "increment", "tir.noalias": True})
    for i in T.parallel(ROWS):
        for j in range(COLS):
            a[i, j] = a[i, j] + T.float32(1)


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("launch") / "increment.so"
    lib = tvm.compile(tvm.IRModule({"increment": _increment}), target=make_target(None))
    lib.export_library(str(path))
    return path


def _launch_pointer(path: Path) -> int | None:
    return ctypes.c_void_p.in_dll(ctypes.CDLL(str(path)), "__TVMBackendParallelLaunch").value


def _ours() -> int | None:
    return ctypes.cast(parallel_launch._launcher().convtune_parallel_launch, ctypes.c_void_p).value


def _increments(module, calls: int) -> np.ndarray:
    x = tvm.runtime.tensor(np.zeros((ROWS, COLS), "float32"), tvm.cpu())
    for _ in range(calls):
        module["increment"](x)
    return x.numpy()


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_task_runs_once_per_launch(library, threads):
    set_threads(threads)
    module = load_library(library)
    assert _launch_pointer(library) == _ours()
    assert np.array_equal(_increments(module, 500), np.full((ROWS, COLS), 500.0, "float32"))


def test_launches_from_two_threads_at_once_each_run_whole(library):
    set_threads(2)
    module = load_library(library)
    results: list[np.ndarray] = []

    def work() -> None:
        results.append(_increments(module, 300))

    workers = [threading.Thread(target=work) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(results) == 2
    for got in results:
        assert np.array_equal(got, np.full((ROWS, COLS), 300.0, "float32"))


def test_the_switch_keeps_tvms_pool(library, monkeypatch):
    monkeypatch.setenv(parallel_launch.ENV, "tvm")
    why = parallel_launch.install(library, 2)
    assert why is not None and "TVM's thread pool" in why
    module = tvm.runtime.load_module(str(library))  # the runtime fills in its own launch again
    assert _launch_pointer(library) != _ours()
    assert np.array_equal(_increments(module, 50), np.full((ROWS, COLS), 50.0, "float32"))
