"""Our space for local response normalization (``ops/lrn.py``): one vectorized pass.

- NCHW: channels in parallel, each channel's map as one row of ``H·W`` values in vectors (a
  sampled width, the partial last vector peeled): AlexNet's 54×54 maps have no width that
  whole vectors divide, and the generic space, which tiles by divisors, left the power
  scalar.
- Blocked: (n, channel block, row) in parallel; per pixel the squares of three blocks (three
  vectors) and the normalization of the block's lanes as one vector.

No other knob: the kernel reads its input once and is bound by the power's arithmetic.
Measured (AMX Xeon VM, 2 threads, 96×54×54): see ``tuner/graph/lrn.py``.
"""

from __future__ import annotations

from functools import partial
from typing import ClassVar

from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.space_generator import ScheduleFn, SpaceGenerator
from tvm.target import Target

from ..ops.annotations import mark_space
from ..ops.isa import vector_lanes
from ..ops.lrn import LRN_BLOCK, WINDOW_BLOCK
from ..ops.nchwc import block_names
from ..ops.rows import parallel_rows
from .base import ScheduleSpace

SPACE_NAME = "lrn"


def lrn_kind(mod: IRModule) -> str | None:
    """``"nchw"`` or ``"blocked"`` if the task is one of ``ops/lrn.py``'s kernels alone."""
    names = block_names(Schedule(mod))
    if names == [LRN_BLOCK]:
        return "nchw"
    if names == [WINDOW_BLOCK, LRN_BLOCK]:
        return "blocked"
    return None


def schedule_lrn(sch: Schedule, lanes: int) -> None:
    """The schedule of the module docstring for the task's kernel (in place)."""
    kind = lrn_kind(sch.mod)
    assert kind is not None, "the space applies to LRN kernels only"
    lrn = sch.get_sblock(LRN_BLOCK)
    mark_space(sch, lrn, SPACE_NAME)
    if kind == "nchw":
        *_, h, w = sch.get_loops(lrn)
        sch.fuse(h, w)
        parallel_rows(sch, lrn, lanes)
        return
    n, c_outer, h, _, lane = sch.get_loops(lrn)
    rows = sch.fuse(n, c_outer, h)
    sch.parallel(rows)
    sch.vectorize(lane)
    # A row's squares first, then its normalization: the taps' unaligned loads read squares
    # stored a row earlier, from L1. Squared per pixel instead, each load spanned two stores
    # still in flight and waited for them (0.53 ms for 96×54×54 against 0.2 in NCHW, AMX Xeon).
    window = sch.get_sblock(WINDOW_BLOCK)
    sch.compute_at(window, rows)
    *_, vectors, lanes_of = sch.get_loops(window)
    sch.unroll(vectors)
    sch.vectorize(lanes_of)


def design_spaces(sch: Schedule, lanes: int) -> list[Schedule]:
    schedule_lrn(sch, lanes)
    return [sch]


class LrnSpace(ScheduleSpace):
    """LRN kernels (above): a design or two per task, searched alone first."""

    name: ClassVar[str] = SPACE_NAME
    seed_trials: ClassVar[int] = 2

    def applies_to(self, mod: IRModule) -> bool:
        return lrn_kind(mod) is not None

    def generator(self, target: Target) -> SpaceGenerator:
        return ScheduleFn(
            partial(design_spaces, lanes=vector_lanes(target)),
            sch_rules=[],
            postprocs="llvm",
            mutator_probs="llvm",
        )
