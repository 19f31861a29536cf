"""Reductions along the innermost axis: Softmax, LayerNorm's means, ReduceMax/Mean/Sum over
the last axis, one row per output element, computed row by row with vector accumulators.

TOPI writes such a reduction as one scalar loop per row (``max_k x[row, k]``), and neither the
generic space nor the unscheduled function vectorizes it: a reduction cannot be vectorized
along its own axis without ``rfactor``, which MetaSchedule's x86 rules add only to tasks with
too little parallelism. Measured on a Xeon VM (2026-12-04, PP-OCRv5's recogniser, cold 4-minute
tune): its 40×18385 Softmax over the character classes took 2.0 ms, a fifth of the model and
more than its largest conv, at 1.5 GFLOP/s. Here each reduction is

    for row in parallel:                      # the block's rows, fused
        for k_outer:                          # rfactor: v accumulators × lanes, vectorized
            acc[row, 0:v·lanes] ⊕= f(x[row, k_outer·v·lanes : +v·lanes])   # tail peeled
        r[row] = ⊕ acc[row, :]                # one horizontal reduction per row

with ``v`` (1, 2 or 4 vectors) a sampled decision, every elementwise block but the output
(Softmax's ``exp``) computed inline where it is read, and the output block's rows in parallel,
its last axis vectorized (``v`` vectors per iteration, sampled). Softmax over 18385 classes,
40 rows, Zen 5: 0.25 ms against 0.9 unscheduled. One parallel loop per reduction, not one for
the whole row: see :func:`_factor`.

Inline, Softmax's ``exp`` is computed twice, in its sum and in the output. A second design
computes it once into its buffer (rows in parallel, vectorized), which the sum and the output
read: PP-OCRv6 small rec's 40×18710 Softmax on a Zen 3 VM (AVX2, 2 threads, 2026-12-07, every
width of both designs, warm) 0.272 ms at best against 0.423 inline. The search picks per task.

A task qualifies by its TIR (:func:`row_reductions`): every reduction reduces over one axis
that indexes only the innermost dimension of what it reads, each read row being the output
element's (a MatMul's ``B[k, j]`` or ``B[j, k]`` is not), rows of at least :data:`MIN_ROW`
elements, and every other block is elementwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import ClassVar

from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.space_generator import ScheduleFn, SpaceGenerator
from tvm.s_tir.schedule import SBlockRV
from tvm.target import Target
from tvm.tirx import IterVar, Var
from tvm.tirx.analysis import undefined_vars

from ..ops.annotations import PEEL_TAIL, mark_space
from ..ops.isa import vector_lanes
from ..ops.rows import parallel_rows, sample_width
from .base import ScheduleSpace

SPACE_NAME = "row-reduce"
#: Vector accumulators per reduction the search chooses from: one is a latency chain (a max
#: or add per vector and row), more break it at the cost of a longer horizontal tail.
ACCUMULATOR_VECTORS = (1, 2, 4)
#: Output vectors per iteration of the output block's loop.
OUTPUT_VECTORS = (1, 2, 4)
#: The shortest row worth vector accumulators: four AVX-512 vectors (YOLO's 16-bin DFL
#: softmax is not).
MIN_ROW = 64


def _row_extent(sch: Schedule, block: SBlockRV) -> int | None:
    """The reduction extent if ``block`` reduces its one reduction axis, its last, over the
    innermost dimension of the rows it reads, each row indexed by the block's spatial axes in
    order; else None."""
    stmt = sch.get(block)
    kinds = [int(iv.iter_type) for iv in stmt.iter_vars]
    spatial = kinds.count(IterVar.DataPar)
    if kinds != [IterVar.DataPar] * spatial + [IterVar.CommReduce] or spatial == 0:
        return None
    k = stmt.iter_vars[-1].var
    reads_rows = False
    for region in stmt.reads:
        uses_k = [_uses(r.min, k) or int(r.extent) != 1 for r in region.region]
        if not any(uses_k):
            continue
        *row, last = region.region
        if any(uses_k[:-1]) or not last.min.same_as(k):
            return None
        # The read's row is the output element's: its spatial axes in order, but for the
        # unit axes a keepdims reduction adds (ReduceMean's ``x_red[n, c, 0]``).
        read_vars = [r.min for r in row]
        rows = [
            iv.var
            for iv in stmt.iter_vars[:spatial]
            if int(iv.dom.extent) != 1 or any(v.same_as(iv.var) for v in read_vars)
        ]
        if len(rows) != len(read_vars) or not all(
            r.same_as(v) for r, v in zip(read_vars, rows, strict=True)
        ):
            return None
        reads_rows = True
    return int(stmt.iter_vars[-1].dom.extent) if reads_rows else None


def _uses(expr: object, var: Var) -> bool:
    return any(v.same_as(var) for v in undefined_vars(expr))


def row_reductions(sch: Schedule) -> list[str] | None:
    """The names of the task's reduction blocks if every block is either such a row
    reduction (rows of at least :data:`MIN_ROW` elements) or elementwise, else None."""
    names = []
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        stmt = sch.get(block)
        kinds = {int(iv.iter_type) for iv in stmt.iter_vars}
        if kinds <= {IterVar.DataPar}:
            continue
        extent = _row_extent(sch, block)
        if extent is None or extent < MIN_ROW:
            return None
        names.append(str(stmt.name_hint))
    return names or None


def shared_elementwise(sch: Schedule, names: list[str]) -> list[str]:
    """The elementwise blocks but the output that two or more blocks read (Softmax's ``exp``,
    read by its sum and by the output); ``names`` are the task's :func:`row_reductions`."""
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))[:-1]
    return [
        str(sch.get(block).name_hint)
        for block in blocks
        if str(sch.get(block).name_hint) not in names and len(sch.get_consumers(block)) > 1
    ]


def schedule_rows(sch: Schedule, lanes: int, kept: Sequence[str] = ()) -> None:
    """The row-by-row schedule of the module docstring (in place); the elementwise blocks named
    in ``kept`` (:func:`shared_elementwise`) are computed once into their buffer (rows in
    parallel, vectorized) instead of inline at each reader. Raises a ``ScheduleError`` where
    the task's blocks do not fit it (``applies_to`` tries it first)."""
    names = row_reductions(sch)
    assert names is not None, "the space applies to row reductions only"
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    output = blocks[-1]
    reductions = [sch.get_sblock(name) for name in names]
    mark_space(sch, reductions[0], SPACE_NAME)
    for block in blocks[:-1]:
        name = str(sch.get(block).name_hint)
        if name in kept:
            parallel_rows(sch, block, lanes, OUTPUT_VECTORS)
        elif name not in names:
            sch.compute_inline(block)
    for block in reductions:
        _factor(sch, block, lanes)
    if str(sch.get(output).name_hint) not in names:
        parallel_rows(sch, output, lanes, OUTPUT_VECTORS)


def _factor(sch: Schedule, block: SBlockRV, lanes: int) -> None:
    """``block`` accumulated per row in ``v`` vectors of lanes (an rfactor block, its lanes
    innermost and vectorized, rows in parallel), then reduced across them in the same
    parallel iteration.

    Each reduction is a parallel loop of its own: ``compute_at`` under one row loop for all
    blocks would rebuild a block's loops from the region its consumer needs and drop the
    predicate of a split that does not divide the row (an 80-element sum in 32-lane
    accumulators read past the row and returned NaN), and ``rfactor`` refuses a block under a
    loop it shares with others."""
    *rows, k = sch.get_loops(block)
    width = sample_width(sch, ACCUMULATOR_VECTORS, lanes)
    outer, lanes_loop = sch.split(k, [None, width])
    sch.annotate(outer, PEEL_TAIL, 1)
    rfactor = sch.rfactor(lanes_loop, len(rows))
    loops = sch.get_loops(rfactor)
    row = sch.fuse(*loops[: len(rows)]) if len(rows) > 1 else loops[0]
    sch.vectorize(loops[-1])
    sch.parallel(row)
    sch.reverse_compute_at(block, row, preserve_unit_loops=True)
    # Decomposed here, not by the postprocessor: once one predicated rfactor block is
    # decomposed, TVM no longer takes another for a reduction block ("violates condition
    # #2"), so Softmax's Σ exp failed MetaSchedule's RewriteReductionBlock whenever neither
    # width divided the row.
    sch.decompose_reduction(rfactor, loops[-2])


def row_sketches(sch: Schedule, lanes: int) -> list[Schedule]:
    """The inline design, and the materialized one where a block is read twice."""
    designs = [sch]
    shared = shared_elementwise(sch, row_reductions(sch) or [])
    if shared:
        materialized = sch.copy()
        schedule_rows(materialized, lanes, kept=shared)
        designs.append(materialized)
    schedule_rows(sch, lanes)
    return designs


def fits(mod: IRModule) -> bool:
    """Whether the task is made of row reductions and elementwise blocks that every design
    fits, tried on a scratch schedule so the space declines instead of raising while
    MetaSchedule generates its designs."""
    sch = Schedule(mod)
    if row_reductions(sch) is None:
        return False
    try:
        row_sketches(sch, lanes=16)
    except (ValueError, RuntimeError):  # a ScheduleError or TVM's own error
        return False
    return True


class RowReductionSpace(ScheduleSpace):
    """Softmax, LayerNorm's means and other reductions along the innermost axis: the schedule
    above, 3 widths per reduction and for the output (27 candidates for a Softmax), searched
    alone first and then in the union with the generic space."""

    name: ClassVar[str] = SPACE_NAME
    seed_trials: ClassVar[int] = 4

    def applies_to(self, mod: IRModule) -> bool:
        return fits(mod)

    def generator(self, target: Target) -> SpaceGenerator:
        return ScheduleFn(
            partial(row_sketches, lanes=vector_lanes(target)),
            sch_rules=[],
            postprocs="llvm",
            mutator_probs="llvm",
        )
