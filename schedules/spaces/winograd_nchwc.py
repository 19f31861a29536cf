"""Winograd F(m×m, 3×3) in the blocked layout: ``NCHW{a}c`` in, ``NCHW{b}c`` out, and its space.

Its blocks, each vectorized along a channel block:

- ``winograd_pad``: the input zero-padded to whole tiles;
- ``winograd_data_pack_rows`` then ``winograd_data_pack``: ``V[ε, ν, p, ci] = (Bᵀ d_p B)[ε, ν]``
  for every tile ``p`` and input channel, as two 1-D passes (rows, then columns) written term by
  term with the transform's nonzero coefficients only (``B`` of F(4×4) is half zeros); one sum
  per index is picked by a ``Select`` on a loop variable that the schedule unrolls, so the
  selects fold away at compile time, and the row pass is computed per tile, in registers;
- ``winograd_bgemm``: ``M[ε, ν, co, p] = Σ_ci V[ε, ν, p, ci] · U[ε, ν, co, ci]``, α² small
  GEMMs with ``co`` blocks as vector lanes and tiles as register rows;
- ``winograd_inverse_cols`` then ``winograd_inverse``: ``Y = Aᵀ M A``, the same two passes per
  tile, written straight into the blocked output, cropped, so the model's elementwise epilogue
  (bias, residual, ReLU) fuses after it like after the direct conv.

``U`` is the weight transformed at build time (:func:`pack_weight`), so no weight transform runs
at inference. Why a space of our own: TOPI's NCHW Winograd would put two layout transforms around
every conv of a blocked model, and its compute sums over the transform matrices' zeros.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from tvm import te, tirx, topi
from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.space_generator import SpaceGenerator
from tvm.target import Target

from . import winograd
from .base import ScheduleSpace, mark_space
from .epilogue import fusable, inline_into_last
from .epilogue import reads_once as epilogue_reads_once
from .nchwc_conv import (
    accumulate_locally,
    block_names,
    epilogue_at,
    parallel_vectorize,
    register_block_space,
)
from .prefetch import sample_weight_prefetch

SPACE_NAME = "winograd-nchwc"
PAD_BLOCK = "winograd_pad"
PACK_ROWS_BLOCK = "winograd_data_pack_rows"
PACK_BLOCK = "winograd_data_pack"
GEMM_BLOCK = "winograd_bgemm"
INVERSE_COLS_BLOCK = "winograd_inverse_cols"
INVERSE_BLOCK = "winograd_inverse"
#: Input channels ahead of the GEMM's reduction whose transformed weights are prefetched (0:
#: none). Zen 5, 2026-12-02, 256×14×14 F(4×4), U flushed: 2 output blocks × 8 tiles 0.44-0.51
#: ms without, 0.31-0.37 at 32 ahead, 0.31-0.32 at 64; the widest block (1 × 16 tiles) 0.65
#: against 0.42-0.46, though 0.40 against 0.25 ms when U is in L3 already.
WEIGHT_PREFETCH_DISTANCES = (0, 32, 64)


def pack_weight(weight: np.ndarray, tile: int, out_block: int) -> np.ndarray:
    """OIHW 3×3 weights → ``(α, α, CO/b, CI, b)``: ``G·w·Gᵀ`` (float64, rounded once) with the
    output channels blocked by ``out_block`` for the GEMM's vector lanes."""
    u = winograd.transform_weight(weight, tile)  # (α, α, CI, CO)
    alpha, _, ci, co = u.shape
    blocked = u.reshape(alpha, alpha, ci, co // out_block, out_block).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(blocked)


def _terms(matrix: np.ndarray, column: int) -> list[tuple[int, float]]:
    return [(row, float(c)) for row, c in enumerate(matrix[:, column]) if c != 0.0]


def _transform(index: tirx.PrimExpr, matrix: np.ndarray, read: Callable[[int], Any]) -> Any:
    """``Σ_r matrix[r, index] · read(r)`` over the nonzero coefficients, for a loop variable
    ``index``: a select chain over its values that folds to one sum once the loop is unrolled."""
    expr = None
    for column in reversed(range(matrix.shape[1])):
        total = None
        for row, coefficient in _terms(matrix, column):
            term = read(row) * tirx.const(coefficient, "float32")
            total = term if total is None else total + term
        expr = total if expr is None else tirx.Select(index == column, total, expr)
    return expr


def conv2d_winograd_nchwc(
    data: te.Tensor, packed: te.Tensor, padding: Any, tile: int, out_dtype: str
) -> te.Tensor:
    """TE compute: ``data`` (N, CI/a, H, W, a), ``packed`` from :func:`pack_weight`, output
    (N, CO/b, OH, OW, b); a 3×3 stride-1 convolution with ``padding`` (top, left, bottom, right).

    Both transforms are separable and run as two 1-D passes (rows, then columns): each output
    is a sum of at most α terms, where the 2-D form summed up to α² with every (ε, ν) choice
    in one expression. That expression made F(4×4) candidates compile in 6-15 s (10 s of a
    17 s compile in TIR's common-subexpression pass alone), against 0.2-0.5 s for F(2×2)."""
    top, left, bottom, right = (int(p) for p in padding)
    batch, ci_chunks, height, width, ci_block = (int(d) for d in data.shape)
    alpha, _, co_chunks, channels, co_block = (int(d) for d in packed.shape)
    assert alpha == tile + 2 and channels == ci_chunks * ci_block
    out_h, out_w = height + top + bottom - 2, width + left + right - 2
    tiles_h, tiles_w = -(-out_h // tile), -(-out_w // tile)
    tiles = batch * tiles_h * tiles_w
    a_mat, b_mat, _ = (m.astype(np.float64) for m in winograd.transform_matrices(tile))
    padded = topi.nn.pad(
        data,
        [0, 0, top, left, 0],
        [0, 0, tiles_h * tile + 2 - height - top, tiles_w * tile + 2 - width - left, 0],
        name=PAD_BLOCK,
    )

    def pack_rows(eps: Any, col: Any, p: Any, c: Any, ci: Any) -> Any:
        n, y, x = p // (tiles_h * tiles_w), p // tiles_w % tiles_h, p % tiles_w
        return _transform(eps, b_mat, lambda row: padded[n, c, y * tile + row, x * tile + col, ci])

    rows = te.compute((alpha, alpha, tiles, ci_chunks, ci_block), pack_rows, name=PACK_ROWS_BLOCK)
    packed_data = te.compute(
        (alpha, alpha, tiles, ci_chunks, ci_block),
        lambda eps, nu, p, c, ci: _transform(nu, b_mat, lambda col: rows[eps, col, p, c, ci]),
        name=PACK_BLOCK,
    )
    rc = te.reduce_axis((0, channels), name="rc")
    gemm = te.compute(
        (alpha, alpha, co_chunks, tiles, co_block),
        lambda eps, nu, co, p, cb: te.sum(
            packed_data[eps, nu, p, rc // ci_block, rc % ci_block].astype(out_dtype)
            * packed[eps, nu, co, rc, cb].astype(out_dtype),
            axis=rc,
        ),
        name=GEMM_BLOCK,
    )
    # Columns first: ``inverse_cols[ε, vw, co, p]`` = Σ_ν M[ε, ν] A[ν, vw], then the rows.
    cols = te.compute(
        (alpha, tile, co_chunks, tiles, co_block),
        lambda eps, vw, co, p, cb: _transform(vw, a_mat, lambda nu: gemm[eps, nu, co, p, cb]),
        name=INVERSE_COLS_BLOCK,
    )

    def inverse(n: Any, co: Any, h: Any, w: Any, cb: Any) -> Any:
        p = (n * tiles_h + h // tile) * tiles_w + w // tile
        return _transform(h % tile, a_mat, lambda eps: cols[eps, w % tile, co, p, cb])

    return te.compute((batch, co_chunks, out_h, out_w, co_block), inverse, name=INVERSE_BLOCK)


def is_winograd_nchwc(mod: IRModule) -> bool:
    """Whether the task holds the blocked Winograd blocks above."""
    return GEMM_BLOCK in block_names(Schedule(mod))


def winograd_tile(mod: IRModule) -> int:
    """The output tile m of the task's F(m×m, 3×3) (its GEMM runs over α = m + 2 squared); 0
    for a task that is no Winograd kernel."""
    sch = Schedule(mod)
    if GEMM_BLOCK not in block_names(sch):
        return 0
    return _tile_of(sch, sch.get_sblock(GEMM_BLOCK))


def _tile_of(sch: Schedule, gemm: Any) -> int:
    return int(sch.get(gemm).reads[0].source.shape[0]) - 2


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
    mark_space(sch, gemm, SPACE_NAME)
    if sketch.inline_pad:
        sch.compute_inline(blocks[names.index(PAD_BLOCK)])
    else:
        parallel_vectorize(sch, blocks[names.index(PAD_BLOCK)])

    eps, nu, co, p, cb, rc = sch.get_loops(gemm)
    chunks = sketch.chunks
    co_outer, co_inner = sch.split(co, [None, chunks])
    rows = sch.sample_perfect_tile(p, n=2, max_innermost_factor=max(1, max_block // chunks))
    p_outer, p_inner = sch.split(p, rows)
    pack = blocks[names.index(PACK_BLOCK)]
    if sketch.tile_parallel:
        sch.reorder(p_outer, eps, nu, co_outer, rc, p_inner, co_inner, cb)
        sch.parallel(p_outer)
        sch.compute_at(pack, p_outer, preserve_unit_loops=True)
        block_loop = co_outer
    else:
        # Threads split (ε, ν, output channels): the weights each reads are its own.
        sch.reorder(eps, nu, co_outer, p_outer, rc, p_inner, co_inner, cb)
        sch.parallel(sch.fuse(eps, nu, co_outer))
        block_loop = p_outer
    # U streams from memory (9.4 MB a layer at 256×14×14 F(4×4)): its lines ``distance`` input
    # channels ahead are prefetched at every step of the reduction (prefetch.py), with the
    # accumulators in a thread-local buffer so they stay in registers.
    sample_weight_prefetch(sch, gemm, rc, WEIGHT_PREFETCH_DISTANCES)
    accumulate_locally(sch, gemm, block_loop)
    sch.unroll(p_inner)
    sch.unroll(co_inner)
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
    tile = _tile_of(sch, gemm)
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
