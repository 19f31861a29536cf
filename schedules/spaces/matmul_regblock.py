"""MatMul and Gemm tasks whose right operand is read ``B[k, j]``: a register block of
output rows × vectors of output columns, the columns' weights kept in L1 while every row
streams past them.

The generic space tiles such a task by MetaSchedule's multi-level rule, and found no good
schedule for the OCR recognisers' class heads: PP-OCRv5's 40×120 by 120×18400 MatMul (the
18385 classes padded to whole vectors, ``matmul_padding``) took 1.69 ms on a Xeon VM against
onnxruntime's 1.15, where its 8.8 MB of weights stream from memory in 0.3 ms and its 177
MFLOP take 0.36 at peak. Here::

    for j_outer in parallel:                 # v vectors of lanes of output columns
        for i_outer:                         # r rows of output
            acc[r, v·lanes] = 0
            for k:
                w[c] = B[k, j_outer·v·lanes + c·lanes : +lanes]           for c < v
                for row < r, c < v:          # unrolled
                    acc[row, c] += broadcast(A[i_outer·r + row, k]) * w[c]
            C[rows, columns] = epilogue(acc)

``v`` is one design space per count of vectors dividing the columns (1 to 6), ``r`` a sampled
tile (``r·v`` ≤ the accumulator registers). The weights of one ``j_outer`` (K × v·lanes)
stay in L1 across the rows, so they are read from memory once. The epilogue (bias,
activation) runs on the accumulators; one that slices padded columns away runs after, rows in
parallel (``ops/rows.py``).

A product of at most :data:`PANEL_ROWS` rows (a classifier's fully connected layers at batch
1) has no reuse of its weights to win, only their stream from memory, and the block above
reads that stream badly: ``v·lanes`` floats of each row of ``B``, 16 KB apart for 4096
columns, a new page every few cache lines. One more design (:func:`schedule_column_panels`)
gives each thread a few wide panels of columns and walks ``k`` over them, so every thread
reads whole rows' spans of ``B`` in order, its accumulators (≤ :data:`PANEL_FLOATS`) in L1::

    for panel in parallel:                   # c panels, c sampled
        acc[rows, N/c] = 0
        for k:
            for row, column vector:
                acc[row, column] += broadcast(A[row, k]) * B[k, panel·N/c + column]
        C[rows, panel] = epilogue(acc)

Measured on an AMX Xeon VM (2026-12-05, 2 threads), ZFNet's 9216×4096 layer with bias and ReLU:
the register block's best (``v`` = 4) 9.73 ms (15.5 GB/s of weights), two panels 5.82 ms
(25.9 GB/s), onnxruntime's Gemm 5.69 ms.

A panel still reads each row of ``B`` in pieces (4 KB of a 16 KB row for four panels), and the
hardware prefetchers start again at every piece: on a Zen 4 VM (2026-12-06) ZFNet's 18432×4096
layer took 13.4 ms in the best panel design (22.5 GB/s, the triad 27-28), onnxruntime's Gemm
10.9. The split-reduction design (:func:`schedule_split_reduction`) gives each thread a
contiguous range of whole rows of ``B``, one stream from memory, and sums the threads' partial
rows after::

    for part in parallel:                    # p parts of k, p sampled
        partial[part, rows, :] = 0
        for k in part's range:
            for row, column vector:
                partial[part, row, column] += broadcast(A[row, k]) * B[k, column]
    for row, column vector in parallel:
        C[row, column] = epilogue(Σ_part partial[part, row, column])

Each kernel alone on that VM (2 threads, median of 9 × 5 calls, weights streamed from memory),
the best part count against the best panel count: 18432×4096 9.6 ms (four parts, 31 GB/s)
against 16.5; 9216×4096 4.7 ms (eight) against 9.2; 4096×4096 1.4 (eight) against 2.8.

A task qualifies by its TIR (:func:`matmul_block`): one reduction block over (batch…, i, j, k)
reading ``A[…, i, k]`` and ``B[…, k, j]``, nothing before it, elementwise blocks after, and
whole vectors of columns.
"""

from __future__ import annotations

import math
from functools import partial
from typing import ClassVar

from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.space_generator import ScheduleFn, SpaceGenerator
from tvm.s_tir.schedule import LoopRV, SBlockRV
from tvm.target import Target
from tvm.tirx import FloorDiv, FloorMod, IterVar, Var

from ..ops.annotations import mark_space
from ..ops.epilogue import inline_into_last
from ..ops.isa import accumulator_limit, vector_lanes
from ..ops.matmul import PANEL_ROWS, vector_width
from ..ops.nchwc import accumulate_locally, design_copies, epilogue_at
from ..ops.rows import parallel_rows
from .base import ScheduleSpace

SPACE_NAME = "matmul-regblock"
#: Vectors of output columns per register block, one design space each (those dividing the
#: columns); with ``r`` rows they make ``r·v`` of the accumulator registers, and ``v`` weight
#: vectors plus a broadcast must fit beside them.
COLUMN_VECTORS = (1, 2, 3, 4, 5, 6)
#: Panels of columns the column-panel design samples from (a multiple of the threads of a
#: two-core machine first: one panel per thread was the fastest there).
PANEL_COUNTS = (2, 4, 8, 16)
#: Most accumulators one panel keeps (64 KB of fp32, the stack array of ``stack_locals``).
PANEL_FLOATS = 16384
#: Parts of the reduction the split-reduction design samples from (one per thread of a two-core
#: machine first); each part's partial rows are at most :data:`PANEL_FLOATS` floats.
SPLIT_COUNTS = (2, 4, 8)
#: Rows of ``B`` below which the reduction is not split: each part must stream far more than
#: the partial rows it writes and sums.
MIN_SPLIT_DEPTH = 512


def matmul_block(sch: Schedule) -> tuple[SBlockRV, list[SBlockRV]] | None:
    """The task's matmul block and the elementwise blocks after it, if it is the first block,
    reduces (batch…, i, j) over k reading ``A[…, i, k]`` and ``B[…, k, j]``, and every other
    block is elementwise; else None."""
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    if not blocks:
        return None
    first = sch.get(blocks[0])
    kinds = [int(iv.iter_type) for iv in first.iter_vars]
    if len(kinds) < 3 or kinds != [IterVar.DataPar] * (len(kinds) - 1) + [IterVar.CommReduce]:
        return None
    if any(int(iv.iter_type) != IterVar.DataPar for b in blocks[1:] for iv in sch.get(b).iter_vars):
        return None
    i, j, k = (iv.var for iv in first.iter_vars[-3:])
    if len(first.reads) != 2 or len(first.writes) != 1:
        return None
    a, b = (region.region for region in first.reads)
    (c,) = (region.region for region in first.writes)
    if not (_ends_with(a, i, k) and _reads_columns(b, k, j) and _ends_with(c, i, j)):
        return None
    return blocks[0], blocks[1:]


def _ends_with(region: list, outer: object, inner: object) -> bool:
    return (
        len(region) >= 2
        and region[-2].min.same_as(outer)
        and region[-1].min.same_as(inner)
        and all(int(r.extent) == 1 for r in region)
    )


def _reads_columns(region: list, k: Var, j: Var) -> bool:
    """Whether ``region`` reads ``B[…, k, j]``, or ``B_packed[j // w, k, j % w]``
    (``ops/matmul.py``)."""
    if _ends_with(region, k, j):
        return True
    if len(region) != 3 or any(int(r.extent) != 1 for r in region):
        return False
    panel, depth, lane = (r.min for r in region)
    return (
        isinstance(panel, FloorDiv)
        and isinstance(lane, FloorMod)
        and panel.a.same_as(j)
        and lane.a.same_as(j)
        and depth.same_as(k)
    )


def _extents(mod: IRModule) -> tuple[int, int, int] | None:
    """The output rows (batch axes included), columns and reduction depth (``k``) of the task's
    matmul block; None if it has none."""
    sch = Schedule(mod)
    found = matmul_block(sch)
    if found is None:
        return None
    *rows, columns, depth = (int(iv.dom.extent) for iv in sch.get(found[0]).iter_vars)
    return math.prod(rows), columns, depth


def _columns(mod: IRModule) -> int | None:
    """The output columns (``j``'s extent) of the task's matmul block; None if it has none."""
    extents = _extents(mod)
    return None if extents is None else extents[1]


def _matmul_and_output(sch: Schedule) -> tuple[SBlockRV, SBlockRV | None]:
    """The task's matmul block (marked as this space's) and its epilogue inlined into one output
    block (None without one)."""
    found = matmul_block(sch)
    assert found is not None, "the space applies to MatMul tasks only"
    matmul, after = found
    mark_space(sch, matmul, SPACE_NAME)
    return matmul, inline_into_last(sch, after)


def _epilogue_and_init(
    sch: Schedule,
    matmul: SBlockRV,
    output: SBlockRV | None,
    at: LoopRV,
    k: LoopRV,
    lanes: int,
) -> None:
    """The epilogue computed under ``at`` on the accumulators, or after, rows in parallel, when
    it slices padded columns away (the tiles' tail would not vectorize); the accumulators'
    initialization split off at ``k``."""
    if output is not None:
        produced = [int(d) for d in sch.get(matmul).writes[0].source.shape]
        written = [int(d) for d in sch.get(output).writes[0].source.shape]
        if produced == written:
            epilogue_at(sch, output, at, lanes)
        else:
            parallel_rows(sch, output, lanes)
    sch.decompose_reduction(matmul, k)


def schedule_matmul(sch: Schedule, vectors: int, lanes: int, max_block: int) -> None:
    """The register-blocked schedule of the module docstring with ``vectors`` column vectors
    (in place)."""
    matmul, output = _matmul_and_output(sch)
    *batch, i, j, k = sch.get_loops(matmul)
    j_outer, j_in, lane = sch.split(j, [None, vectors, lanes])
    rows = sch.sample_perfect_tile(i, n=2, max_innermost_factor=max(1, max_block // vectors))
    i_outer, i_in = sch.split(i, rows)
    sch.reorder(*batch, j_outer, i_outer, k, i_in, j_in, lane)
    sch.parallel(sch.fuse(*batch, j_outer) if batch else j_outer)
    sch.unroll(i_in)
    sch.unroll(j_in)
    sch.vectorize(lane)
    accumulate_locally(sch, matmul, i_outer, lanes)
    _epilogue_and_init(sch, matmul, output, i_outer, k, lanes)


def panel_counts(rows: int, columns: int, lanes: int) -> list[int]:
    """The panel counts of :data:`PANEL_COUNTS` for which a panel holds whole vectors of
    ``lanes`` (the last one may hold fewer) and its accumulators fit in :data:`PANEL_FLOATS`;
    none for more than :data:`PANEL_ROWS` rows."""
    if rows > PANEL_ROWS:
        return []
    vectors = columns // lanes
    return [
        c for c in PANEL_COUNTS if c <= vectors and rows * -(-vectors // c) * lanes <= PANEL_FLOATS
    ]


def schedule_column_panels(sch: Schedule, lanes: int, counts: list[int]) -> None:
    """The column-panel design of the module docstring, its panel count drawn from ``counts``
    (in place)."""
    matmul, output = _matmul_and_output(sch)
    *batch, i, j, k = sch.get_loops(matmul)
    panels = sch.sample_categorical(counts, [1.0 / len(counts)] * len(counts))
    column_vectors, lane = sch.split(j, [None, lanes])
    panel, column = sch.split(column_vectors, [panels, None])
    sch.reorder(panel, *batch, i, k, column, lane)
    sch.parallel(panel)
    sch.vectorize(lane)
    local = sch.cache_write(matmul, 0, "local")
    sch.reverse_compute_at(local, panel, preserve_unit_loops=True)
    sch.vectorize(sch.get_loops(local)[-1])
    _epilogue_and_init(sch, matmul, output, panel, k, lanes)


def split_counts(rows: int, columns: int, depth: int) -> list[int]:
    """The part counts of :data:`SPLIT_COUNTS` for a product of ``rows`` × ``columns`` over
    ``depth``: for few rows (:data:`PANEL_ROWS`) and a deep reduction (:data:`MIN_SPLIT_DEPTH`
    rows of ``B`` per part at least), partial rows of at most :data:`PANEL_FLOATS` floats."""
    if rows > PANEL_ROWS or rows * columns > PANEL_FLOATS:
        return []
    return [p for p in SPLIT_COUNTS if depth // p >= MIN_SPLIT_DEPTH]


def schedule_split_reduction(sch: Schedule, lanes: int, counts: list[int]) -> None:
    """The split-reduction design of the module docstring, its part count drawn from
    ``counts`` (in place)."""
    matmul, output = _matmul_and_output(sch)
    k = sch.get_loops(matmul)[-1]
    parts = sch.sample_categorical(counts, [1.0 / len(counts)] * len(counts))
    part, _ = sch.split(k, [parts, None])
    partial = sch.rfactor(part, factor_axis=0)
    # Each part: its rows of B in order, every output row and column vector for each.
    *rows, column, part, k_in = sch.get_loops(partial)
    column_vector, lane = sch.split(column, [None, lanes])
    sch.reorder(part, k_in, *rows, column_vector, lane)
    sch.parallel(part)
    sch.vectorize(lane)
    sch.decompose_reduction(partial, k_in)
    # The sum of the parts, output vectors in parallel, the epilogue on each.
    *rows, column, part = sch.get_loops(matmul)
    column_vector, lane = sch.split(column, [None, lanes])
    sch.reorder(*rows, column_vector, part, lane)
    outer = sch.fuse(*rows, column_vector)
    sch.parallel(outer)
    sch.vectorize(lane)
    _epilogue_and_init(sch, matmul, output, outer, part, lanes)


def design_spaces(sch: Schedule, lanes: int, max_block: int) -> list[Schedule]:
    """One design space per count of column vectors dividing the columns, in the widest
    vector that divides them (half a zmm register, a ymm, for 120 or 360 columns), and the
    column-panel and split-reduction designs for products of few rows."""
    extents = _extents(sch.mod)
    width = None if extents is None else vector_width(extents[1], lanes)
    assert extents is not None and width is not None, "the space applies to MatMul tasks only"
    rows, columns, depth = extents
    vectors = [v for v in COLUMN_VECTORS if (columns // width) % v == 0]
    spaces = design_copies(sch, vectors, lambda copy, v: schedule_matmul(copy, v, width, max_block))
    counts = panel_counts(rows, columns, width)
    if counts:
        spaces += design_copies(
            sch, [counts], lambda copy, c: schedule_column_panels(copy, width, c)
        )
    parts = split_counts(rows, columns, depth)
    if parts:
        spaces += design_copies(
            sch, [parts], lambda copy, p: schedule_split_reduction(copy, width, p)
        )
    return spaces


class MatmulSpace(ScheduleSpace):
    """MatMul and Gemm tasks: the register block above, one design space per column-vector
    count, rows sampled; searched alone first, then in the union with the generic space."""

    name: ClassVar[str] = SPACE_NAME
    seed_trials: ClassVar[int] = 8

    def applies_to(self, mod: IRModule) -> bool:
        # Whole 8-lane vectors, which every target here has (half a register on AVX-512).
        columns = _columns(mod)
        return columns is not None and vector_width(columns, 16) is not None

    def generator(self, target: Target) -> SpaceGenerator:
        return ScheduleFn(
            partial(
                design_spaces,
                lanes=vector_lanes(target),
                max_block=accumulator_limit(target),
            ),
            sch_rules=[],
            postprocs="llvm",
            mutator_probs="llvm",
        )
