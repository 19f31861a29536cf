"""The prefetch pass: which lines it prefetches, where, and that results do not change."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import ir, tirx
from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.target import codegen

from convtune.schedules.lowering import pipeline as lowering
from convtune.schedules.lowering.pipeline import use_convtune_lowering
from convtune.schedules.ops import annotations
from convtune.schedules.spaces import nchwc_kblock, nchwc_regblock2d
from convtune.schedules.spaces.nchwc_regblock import is_blocked_conv
from convtune.tuner.target import make_target
from tests.schedules.kernels import (
    AVX512,
    assembly,
    assert_close,
    conv_task,
    gemm_schedule,
    random_args,
    run,
    with_each_distance,
)

#: (rows, output blocks, reduction, lanes) of the small GEMM below: ``C[i, o, :] = Σ_k A[i, k]
#: W[o, k, :]`` with ``k`` split in chunks of ``CHUNK``.
ROWS, BLOCKS, DEPTH, LANES, CHUNK = 8, 8, 256, 16, 16


def _gemm(distance: int, rows_inside_chunk: bool = True) -> tuple[IRModule, Schedule]:
    """The GEMM with ``W``'s next chunk prefetched ``distance`` chunks ahead; the rows loop
    inside the chunk loop (and the chunk's inner reduction unrolled), or outside it."""
    sch = gemm_schedule(ROWS, BLOCKS, DEPTH, LANES)
    i, o, b, kk = sch.get_loops(sch.get_sblock("C"))
    chunk, inner = sch.split(kk, [None, CHUNK])
    if rows_inside_chunk:
        sch.reorder(o, chunk, i, inner, b)
        sch.unroll(inner)
    else:
        sch.reorder(i, o, chunk, inner, b)
    sch.vectorize(b)
    annotations.annotate_prefetch(sch, chunk, "W", distance)
    return sch.mod, sch


def _lowered(mod: IRModule) -> tirx.PrimFunc:
    """``mod``'s main after TVM's pipeline and the prefetch pass (as the builder lowers it)."""
    use_convtune_lowering()
    seen: list[tirx.PrimFunc] = []

    @tvm.tirx.transform.prim_func_pass(opt_level=0)
    def keep(func: tirx.PrimFunc, _mod: IRModule, _ctx: object) -> tirx.PrimFunc:
        seen.append(func)
        return func

    from tvm.tirx import compilation_pipeline

    installed = compilation_pipeline.PIPELINE_MAP[lowering.PIPELINE]

    def with_keep(**kwargs: object) -> object:
        passes, host, device = installed(**kwargs)
        return tvm.transform.Sequential([passes, keep]), host, device

    compilation_pipeline.register_tir_pipeline(lowering.PIPELINE, with_keep)
    try:
        tvm.compile(mod, target=make_target(None))
    finally:
        compilation_pipeline.register_tir_pipeline(lowering.PIPELINE, installed)
    return next(f for f in seen if "compute" in f.script())


PREFETCH_ID = codegen.llvm_lookup_intrinsic_id("llvm.prefetch.p0")


def _prefetch_calls(func: tirx.PrimFunc) -> list[ir.Call]:
    return _prefetch_calls_in(func.body)


def _prefetch_calls_in(stmt: tirx.Stmt) -> list[ir.Call]:
    calls: list[ir.Call] = []

    def on_call(call: ir.Call) -> None:
        if call.op.name == "tirx.call_llvm_intrin" and int(call.args[0]) == PREFETCH_ID:
            calls.append(call)

    tvm_ffi.structural_walk(stmt, (ir.Call, on_call))
    return calls


def test_prefetches_the_next_chunk_spread_over_its_rows() -> None:
    mod, _ = _gemm(distance=1)
    func = _lowered(mod)
    # The chunk's 16 rows of W (one 64-byte line each) spread over the 8 rows of C: two
    # lines at the top of each, 256 elements (the next chunk) ahead.
    assert len(_prefetch_calls(func)) == 2
    script = func.script()
    assert "W_1[o * 4096 + k_0 * 256 + 256 + i * 2 * 16]" in script, script
    assert "W_1[o * 4096 + k_0 * 256 + 256 + (i * 2 + 1) * 16]" in script, script
    assert annotations.SOURCE_ANNOTATION not in script
    assert "prefetcht0" in assembly(mod)


def test_prefetches_spread_no_deeper_than_one_line_per_iteration() -> None:
    """A source whose inner loop has as many iterations as the next chunk has lines (16):
    one line at the top of each, none at the source's own level."""
    mod, _ = _gemm(distance=1, rows_inside_chunk=False)
    func = _lowered(mod)
    loops: list[tirx.For] = []
    tvm_ffi.structural_walk(func.body, (tirx.For, loops.append), order="pre")
    inner_loop = next(f for f in loops if f.loop_var.name == "k_1")
    assert len(_prefetch_calls(func)) == 1
    assert len(_prefetch_calls_in(inner_loop)) == 1
    assert f"k_0 * {CHUNK * LANES} + {CHUNK * LANES} + k_1 * {LANES}]" in func.script()


def test_distance_zero_is_no_prefetch() -> None:
    mod, _ = _gemm(distance=0)
    func = _lowered(mod)
    assert _prefetch_calls(func) == []
    assert annotations.SOURCE_ANNOTATION not in func.script()
    assert "prefetcht0" not in assembly(mod)


@pytest.mark.parametrize("distance", [1, 2])
def test_results_do_not_change(distance: int) -> None:
    mod, _ = _gemm(distance)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((ROWS, DEPTH)).astype("float32")
    w = rng.standard_normal((BLOCKS, DEPTH, LANES)).astype("float32")
    got = run(mod, [a, w, np.zeros((ROWS, BLOCKS, LANES), "float32")])
    assert_close(got, np.einsum("ik,okb->iob", a, w))


@pytest.mark.parametrize(
    "space, kernel", [(nchwc_kblock, 3), (nchwc_regblock2d, 1), (nchwc_regblock2d, 3)]
)
def test_a_searched_kernel_prefetches_its_weights_and_stays_exact(
    space: ModuleType, kernel: int
) -> None:
    """A design space of each space that prefetches (the reduction-blocked conv, the 2-D
    register block) with the distance forced to each choice: a prefetch appears exactly when
    it is non-zero, and the output equals the unscheduled TIR's."""
    task = conv_task(
        dict(in_channels=512, out_channels=64, size=7, kernel=kernel, pads=kernel // 2),
        is_blocked_conv,
        AVX512,
    )
    design = space.design_spaces(Schedule(task.mod, seed=1))[0]
    args = random_args(task.mod)
    reference = run(task.mod, args)
    for distance, scheduled in with_each_distance(design, task.mod):
        assert ("prefetcht0" in assembly(scheduled)) == (distance > 0)
        assert_close(run(scheduled, args), reference)
