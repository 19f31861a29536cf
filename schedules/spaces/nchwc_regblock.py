"""Our space for blocked convolutions: a register-blocked direct conv2d_NCHWc (NeoCPU, ATC'19).

The kernel every candidate of this space shares, for one output row segment:

    for ic_outer, kh, kw, ic_inner (= one input channel block):
        w = weights[oc_chunk, ic_outer, kh, kw, ic_inner, 0:x]       # one vector register
        for j in 0 .. reg_n:                                         # unrolled
            acc[j] += broadcast(input[ih(j, kh), iw(j, kw), ic_inner]) * w

``acc`` is ``reg_n`` vector registers of ``x`` fp32 lanes (x = 16 on AVX-512), initialised and
written back (with the fused bias / ReLU / residual epilogue) once per segment. The searched knobs
are the register block ``reg_n`` on the output width and the order of the two outer spatial loops
(tile sizes, recorded as decisions, so MetaSchedule's cost model ranks them and its mutator varies
them). Everything else is fixed by the layout: the vector axis is the output-channel block, the
reduction is split by the input-channel block, and output rows of all channel chunks run in
parallel.
"""

from __future__ import annotations

from typing import ClassVar

from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.space_generator import SpaceGenerator
from tvm.target import Target

from ..ops.nchwc import (
    MAX_REGISTER_BLOCK,
    conv_and_epilogue,
    epilogue_at,
    epilogue_fuses,
    input_channel_block,
    is_blocked_conv,
    parallel_vectorize,
    register_block_space,
)
from ..ops.register_block import split_columns
from .base import ScheduleSpace

SPACE_NAME = "nchwc-regblock"


def schedule_blocked_conv(sch: Schedule, max_block: int = MAX_REGISTER_BLOCK) -> None:
    """Apply the register-blocked conv2d_NCHWc schedule, sampling its knobs (in place); at most
    ``max_block`` accumulators."""
    conv, output, prologue = conv_and_epilogue(sch, SPACE_NAME)
    _, oc_chunk, oh, ow, oc_block, ic, kh, kw = sch.get_loops(conv)
    ow_outer, ow_inner = split_columns(sch, ow, max_block)
    ic_outer, ic_inner = sch.split(ic, [None, input_channel_block(sch, conv)])
    sch.reorder(oc_chunk, oh, ow_outer, ic_outer, kh, kw, ic_inner, ow_inner, oc_block)
    batch = sch.get_loops(conv)[0]
    rows = sch.fuse(batch, oc_chunk, oh)
    sch.parallel(rows)
    sch.unroll(ow_inner)
    sch.vectorize(oc_block)
    epilogue_at(sch, output, ow_outer)
    # The zero-fill of the accumulators happens once per segment, before the reduction; LLVM
    # vectorises it (its loop count depends on the tile sizes, so it is not scheduled here).
    sch.decompose_reduction(conv, ic_outer)
    for block in prologue:
        parallel_vectorize(sch, block)


class RegisterBlockedConvSpace(ScheduleSpace):
    """Blocked convolutions (conv2d_NCHWc): the register-blocked direct kernel above.

    It has 2-8 distinct schedules per layer, usually the fastest ones, which the generic space's
    population of thousands hides from the search: they get ``seed_trials`` alone first.
    """

    name: ClassVar[str] = SPACE_NAME
    seed_trials: ClassVar[int] = 8

    def applies_to(self, mod: IRModule) -> bool:
        return is_blocked_conv(mod) and epilogue_fuses(mod)

    def generator(self, target: Target) -> SpaceGenerator:
        return register_block_space(schedule_blocked_conv, target)
