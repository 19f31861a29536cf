"""Winograd F(m×m, 3×3) in the blocked layout: the schedule space of the op of
``schedules/ops/winograd_conv.py`` (its blocks, and why a space of our own, are described there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.space_generator import SpaceGenerator
from tvm.target import Target

from ..ops.annotations import mark_space, sample_weight_prefetch
from ..ops.bf16_dot import BF16_LOCAL_INTRIN
from ..ops.epilogue import fusable, inline_into_last
from ..ops.epilogue import reads_once as epilogue_reads_once
from ..ops.nchwc import (
    accumulate_locally,
    epilogue_at,
    parallel_vectorize,
    register_block_space,
)
from ..ops.winograd_conv import (
    GEMM_BLOCK,
    INVERSE_BLOCK,
    INVERSE_COLS_BLOCK,
    PACK_BLOCK,
    PACK_ROWS_BLOCK,
    PAD_BLOCK,
    is_winograd_nchwc,
    tile_of,
)
from .base import ScheduleSpace

SPACE_NAME = "winograd-nchwc"
#: Input channels ahead of the GEMM's reduction whose transformed weights are prefetched (0:
#: none). Zen 5, 2026-12-02, 256×14×14 F(4×4), U flushed: 2 output blocks × 8 tiles 0.44-0.51
#: ms without, 0.31-0.37 at 32 ahead, 0.31-0.32 at 64; the widest block (1 × 16 tiles) 0.65
#: against 0.42-0.46, though 0.40 against 0.25 ms when U is in L3 already.
WEIGHT_PREFETCH_DISTANCES = (0, 32, 64)


@dataclass(frozen=True)
class Sketch:
    """The fixed choices of one design space of the Winograd schedule."""

    #: Output-channel blocks per GEMM register block: each broadcast of V feeds that many FMAs.
    chunks: int = 1
    #: The zero padding inlined into the data pack (a select per read), not a pass of its own:
    #: 0.36 against 0.39 ms on a 64-channel 56×56 F(4×4) layer (Zen 4), not always better.
    inline_pad: bool = False
    #: Threads split the tiles, and each packs its own tiles' data right before its GEMMs, so
    #: the packed data stays in the core's cache instead of a pass through memory. Zen 4, best
    #: register block of each, 2 threads: 0.32 against 0.36 ms at 64×56×56 F(4×4), 0.38
    #: against 0.40 at 256×14×14; but 0.90 against 0.66 at 512×7×7 F(2×2) (16 tiles, 16.8 MB
    #: of weights), hence a sketch the search tries, not the default.
    tile_parallel: bool = False


def schedule_winograd(sch: Schedule, max_block: int, sketch: Sketch = Sketch()) -> None:
    """The blocked Winograd schedule of ``sketch`` (in place): the GEMM's register block is
    ``sketch.chunks`` output-channel blocks by a sampled number of tile rows, at most
    ``max_block`` accumulators in all."""
    root = sch.get_sblock("root")
    blocks = sch.get_child_blocks(root)
    names = [sch.get(b).name_hint for b in blocks]
    gemm = blocks[names.index(GEMM_BLOCK)]
    tile = tile_of(sch, gemm)
    mark_space(sch, gemm, SPACE_NAME)
    if sketch.inline_pad:
        sch.compute_inline(blocks[names.index(PAD_BLOCK)])
    else:
        parallel_vectorize(sch, blocks[names.index(PAD_BLOCK)])

    # A bf16 GEMM reduces pairs of input channels per lane (``rc_lane``, the dot intrinsic's).
    eps, nu, co, p, cb, rc, *lane = sch.get_loops(gemm)
    chunks = sketch.chunks
    co_outer, co_inner = sch.split(co, [None, chunks])
    rows = sch.sample_perfect_tile(p, n=2, max_innermost_factor=max(1, max_block // chunks))
    p_outer, p_inner = sch.split(p, rows)
    pack = blocks[names.index(PACK_BLOCK)]
    if sketch.tile_parallel:
        sch.reorder(p_outer, eps, nu, co_outer, rc, p_inner, co_inner, cb, *lane)
        sch.parallel(p_outer)
        sch.compute_at(pack, p_outer, preserve_unit_loops=True)
        block_loop = co_outer
    else:
        # Threads split (ε, ν, output channels): the weights each reads are its own.
        sch.reorder(eps, nu, co_outer, p_outer, rc, p_inner, co_inner, cb, *lane)
        sch.parallel(sch.fuse(eps, nu, co_outer))
        block_loop = p_outer
    # U streams from memory (9.4 MB a layer at 256×14×14 F(4×4)): its lines ``distance`` input
    # channels ahead are prefetched at every step of the reduction (prefetch.py), with the
    # accumulators in a thread-local buffer so they stay in registers.
    sample_weight_prefetch(sch, gemm, rc, WEIGHT_PREFETCH_DISTANCES)
    accumulate_locally(sch, gemm, block_loop)
    sch.unroll(p_inner)
    sch.unroll(co_inner)
    if lane:
        init = sch.decompose_reduction(gemm, rc)
        sch.vectorize(sch.get_loops(init)[-1])
        sch.tensorize(sch.get_loops(gemm)[-2], BF16_LOCAL_INTRIN)
    else:
        sch.vectorize(cb)
        sch.decompose_reduction(gemm, rc)

    # The data pack per (tile, input-channel block): rows then columns, both unrolled, the
    # row pass's α² vectors a local buffer LLVM keeps in registers.
    *_, eps, nu, p, c, ci = sch.get_loops(pack)
    sch.reorder(p, c, eps, nu, ci)
    tile_loop = sch.fuse(p, c)
    if not sketch.tile_parallel:
        sch.parallel(tile_loop)
    sch.unroll(eps)
    sch.unroll(nu)
    sch.vectorize(ci)
    _unrolled_at(sch, blocks[names.index(PACK_ROWS_BLOCK)], tile_loop)

    # The inverse transform and the fused epilogue: one pass over the output, whole tiles unrolled.
    inverse = blocks[names.index(INVERSE_BLOCK)]
    tail = fuse_epilogue(sch, inverse, blocks[names.index(INVERSE_BLOCK) + 1 :])
    inverse = sch.get_sblock(INVERSE_BLOCK)
    n, co, h, w, cb = sch.get_loops(inverse)
    h_outer, h_inner = sch.split(h, [None, tile])
    w_outer, w_inner = sch.split(w, [None, tile])
    sch.reorder(n, co, h_outer, w_outer, h_inner, w_inner, cb)
    sch.parallel(sch.fuse(n, co, h_outer))
    sch.unroll(h_inner)
    sch.unroll(w_inner)
    sch.vectorize(cb)
    _unrolled_at(sch, sch.get_sblock(INVERSE_COLS_BLOCK), w_outer)
    epilogue_at(sch, tail, w_outer)


def fuse_epilogue(sch: Schedule, inverse: Any, epilogue: list[Any]) -> Any:
    """Fuse the task's elementwise ``epilogue`` with the ``inverse`` transform (in place).

    A chain that reads one region per block (bias, ReLU, residual add) is computed inline into
    the inverse block by block from the back, as it always was: the output is written once,
    activated; None is returned. Any other (SiLU's ``x · sigmoid(x)``, HardSwish, Mish, GELU,
    Add+SiLU) is inlined into its last block (``epilogue.py``), which is returned to be computed
    per output tile (:func:`schedule_winograd`), reading the tile the inverse just wrote from
    L1. Inlining that block into the inverse too copies the whole transform into every read of
    it: for F(4×4) at 128×28×28 on Zen 5 (2026-12-03, 1 thread) the same time as per tile (SiLU
    0.452 against 0.453 ms, Mish 0.564 against 0.560), but Mish compiled in 12.7 s against 0.5
    (TIR's common-subexpression pass), near the builder's 30 s limit."""
    if epilogue_reads_once(sch, epilogue, inverse):
        for block in reversed(epilogue):
            sch.reverse_compute_inline(block)
        return None
    return inline_into_last(sch, epilogue)


def _tile_epilogue(sch: Schedule, inverse: Any, last: Any) -> None:
    sch.reverse_compute_at(last, sch.get_loops(inverse)[0])


def _unrolled_at(sch: Schedule, block: Any, loop: Any) -> None:
    """A transform's first 1-D pass computed per tile under ``loop``: its two small loops
    unrolled, the channel block a vector."""
    sch.compute_at(block, loop)
    *_, first, second, lanes = sch.get_loops(block)
    sch.unroll(first)
    sch.unroll(second)
    sch.vectorize(lanes)


def sketches(co_chunks: int) -> list[Sketch]:
    """The design spaces of a layer with ``co_chunks`` output-channel blocks: each register-block
    width (two blocks where their number is even) with either padding and either parallel split."""
    return [
        Sketch(chunks, inline_pad, tile_parallel)
        for chunks in ((1, 2) if co_chunks % 2 == 0 else (1,))
        for inline_pad in (False, True)
        for tile_parallel in (False, True)
    ]


def _design(sch: Schedule, max_block: int) -> list[Schedule]:
    co_chunks = int(sch.get(sch.get_sblock(GEMM_BLOCK)).writes[0].source.shape[2])
    designs = []
    for sketch in sketches(co_chunks):
        copy = sch.copy()
        schedule_winograd(copy, max_block, sketch)
        designs.append(copy)
    return designs


class WinogradConvSpace(ScheduleSpace):
    """Blocked Winograd convolutions: the schedule above, its GEMM register block searched."""

    name: ClassVar[str] = SPACE_NAME
    seed_trials: ClassVar[int] = 8

    def applies_to(self, mod: IRModule) -> bool:
        return is_winograd_nchwc(mod) and fusable(mod, INVERSE_BLOCK, _tile_epilogue)

    def generator(self, target: Target) -> SpaceGenerator:
        return register_block_space(_design, target)
