"""Kernels under FTZ/DAZ (schedules/lowering/denormals.py): a denormal product is zero inside a
kernel, the caller's MXCSR is as it was after the call, and the parallel split is unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import s_tir, te, tirx

from convtune.schedules.lowering.denormals import flush_denormals_in
from convtune.schedules.lowering.pipeline import use_convtune_lowering
from convtune.tuner.target import make_target

TINY = np.finfo(np.float32).tiny


def _dot_rows(rows: int, depth: int, parallel: bool = True) -> tvm.IRModule:
    """y[i] = Σ_r x[i, r] · w[r], rows in parallel."""
    x = te.placeholder((rows, depth), "float32", name="x")
    w = te.placeholder((depth,), "float32", name="w")
    r = te.reduce_axis((0, depth), name="r")
    y = te.compute((rows,), lambda i: te.sum(x[i, r] * w[r], axis=r), name="y")
    sch = s_tir.Schedule(te.create_prim_func([x, w, y]))
    if parallel:
        sch.parallel(sch.get_loops(sch.get_sblock("y"))[0])
    return sch.mod


def _run(mod: tvm.IRModule, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    use_convtune_lowering()
    lib = tvm.compile(mod, target=make_target())
    out = tvm.runtime.tensor(np.ones(x.shape[0], np.float32))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
    return out.numpy()


@pytest.mark.parametrize("rows", [7, 64])  # fewer rows than a chunk each, and many
def test_denormal_products_are_zero_and_the_callers_mxcsr_is_restored(rows: int) -> None:
    x = np.zeros((rows, 32), np.float32)
    x[:, 0] = 2 * TINY  # normal; times 0.25 it is denormal
    x[::2, 1] = 1.0  # even rows also hold a normal product
    w = np.full(32, 0.25, np.float32)
    assert x[0, 0] * w[0] != 0  # numpy computes the denormal before the call ...
    y = _run(_dot_rows(rows, 32), x, w)
    assert x[0, 0] * w[0] != 0  # ... and after it: the caller's thread keeps gradual underflow
    np.testing.assert_array_equal(y[1::2], 0.0)  # the denormal product alone: flushed
    np.testing.assert_array_equal(y[::2], 0.25)


def test_without_a_parallel_loop_the_kernel_is_unchanged() -> None:
    func = _dot_rows(8, 32, parallel=False)["main"]
    assert flush_denormals_in(func).same_as(func)


def test_parallel_loop_becomes_one_chunk_per_core() -> None:
    func = _dot_rows(7, 32)["main"].with_attr("target", make_target("llvm -num-cores=2"))
    chunks: list[int] = []

    def on_for(loop: tirx.For) -> None:
        if loop.kind == tirx.ForKind.PARALLEL:
            chunks.append(int(loop.extent))

    tvm_ffi.structural_walk(flush_denormals_in(func).body, (tirx.For, on_for))
    assert chunks == [2]  # 7 rows as 4 + 3, as TVM's pool splits them on two threads
