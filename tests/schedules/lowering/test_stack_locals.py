"""Small ``local`` buffers become stack arrays (schedules/lowering/stack_locals.py), so a register
block's accumulators keep their registers with a prefetch inside the reduction."""

from __future__ import annotations

import re

import numpy as np
import tvm
from tvm.ir import IRModule

from convtune.schedules.lowering import pipeline as lowering
from convtune.schedules.lowering import prefetch, stack_locals
from convtune.schedules.ops import annotations
from convtune.schedules.ops.nchwc import accumulate_locally
from convtune.tuner.target import make_target
from tests.schedules.kernels import assert_close, gemm_schedule, run

ROWS, DEPTH, LANES = 8, 256, 16
#: The assembly checks read zmm stores, so they compile for an AVX-512 CPU on every host (an AVX2
#: host splits each 16-lane vector into two ymm halves, and keeps fewer accumulators in registers).
AVX512 = "llvm -mcpu=znver4"


def _gemm(blocks: int, at_block: bool = True, distance: int = 32) -> IRModule:
    """``C[i, o, :] = Σ_k A[i, k] W[o, k, :]``: per output block ``o``, ``ROWS`` accumulators
    (unrolled) over ``k``, with ``W`` prefetched ``distance`` steps of ``k`` ahead; accumulated
    in a local buffer per ``o`` (``at_block``) or one for all of C."""
    sch = gemm_schedule(ROWS, blocks, DEPTH, LANES)
    gemm = sch.get_sblock("C")
    i, o, b, kk = sch.get_loops(gemm)
    sch.reorder(o, kk, i, b)
    sch.parallel(o)  # the kernel's arguments reach a parallel body through a closure
    sch.unroll(i)
    sch.vectorize(b)
    annotations.annotate_prefetch(sch, kk, "W", distance)
    if at_block:
        accumulate_locally(sch, gemm, o)
    else:
        sch.cache_write(gemm, 0, "local")
    sch.decompose_reduction(gemm, kk)
    return sch.mod


def _compiled(
    mod: IRModule, passes: tuple[object, ...] = lowering.PASSES, target: str | None = None
) -> tvm.runtime.Module:
    """``mod`` built with our lowering for ``target`` (default: this host), its passes replaced
    by ``passes``."""
    lowering.use_convtune_lowering()
    default = lowering.PASSES
    lowering.PASSES = passes  # type: ignore[assignment]  # read by the pipeline per compile
    try:
        return tvm.compile(mod, target=make_target(target)).mod
    finally:
        lowering.PASSES = default


def _stores_in_prefetch_loop(asm: str) -> int:
    """Vector stores in the basic block of the loop that issues the prefetches."""
    lines = asm.splitlines()
    at = next(n for n, line in enumerate(lines) if "prefetcht0" in line)
    start = max(n for n in range(at) if re.match(r"^\.LBB\d+_\d+:", lines[n]))
    end = next(n for n in range(at, len(lines)) if re.match(r"^\s+j\w+\s", lines[n]))
    block = lines[start:end]
    return sum(bool(re.match(r"^\s+vmov[au]ps\s+%zmm\d+, ", line)) for line in block)


def test_local_accumulators_are_no_workspace() -> None:
    """With the pass the buffer is a stack array, which LLVM turns into registers; without it,
    a ``TVMBackendAllocWorkspace`` call per output block."""
    mod = _gemm(blocks=4)
    workspace = re.compile(r"%C_local = tail call ptr")
    assert not workspace.search(_compiled(mod).inspect_source("ll"))
    assert workspace.search(_compiled(mod, (prefetch.InjectPrefetch,)).inspect_source("ll"))


def test_a_prefetch_in_the_reduction_leaves_the_accumulators_in_registers() -> None:
    """With the pass, the loop is loads, FMAs and prefetches; without it (the workspace TVM
    allocates), each FMA's accumulator is stored back, which is what the pass is for."""
    mod = _gemm(blocks=4)
    with_pass = _compiled(mod, target=AVX512).inspect_source("asm")
    assert _stores_in_prefetch_loop(with_pass) == 0
    without = _compiled(mod, (prefetch.InjectPrefetch,), AVX512).inspect_source("asm")
    assert _stores_in_prefetch_loop(without) >= ROWS


def test_a_large_local_buffer_stays_a_workspace() -> None:
    """C as one local buffer of 64 blocks (32 KiB, over ``MAX_STACK_BYTES``) keeps TVM's
    workspace allocation: a thread's stack is not for large arrays."""
    blocks = 64
    assert ROWS * blocks * LANES * 4 > stack_locals.MAX_STACK_BYTES
    ir_text = _compiled(_gemm(blocks, at_block=False)).inspect_source("ll")
    assert re.search(r"%C_local = tail call ptr", ir_text), "C_local is not a workspace"


def test_results_do_not_change() -> None:
    blocks = 4
    rng = np.random.default_rng(0)
    a = rng.standard_normal((ROWS, DEPTH)).astype("float32")
    w = rng.standard_normal((blocks, DEPTH, LANES)).astype("float32")
    got = run(_gemm(blocks), [a, w, np.zeros((ROWS, blocks, LANES), "float32")])
    assert_close(got, np.einsum("ik,okb->iob", a, w))
