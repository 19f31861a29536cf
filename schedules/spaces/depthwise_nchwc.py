"""Depthwise convolutions in the blocked layout: channels in vector lanes, output columns in
registers.

A depthwise conv (groups = channels, one filter per channel) has no reduction over channels, so
the dense kernel of ``nchwc_conv.py`` (broadcast one input, FMA it into a weight vector of 16 output
channels) does not apply; in NCHW, which is where it stayed before, its vector axis is the output
width and every 3×3 tap is an unaligned load. In ``NCHW{x}c`` the x channels of one pixel are one
vector register, and so are the x filter taps of one (kh, kw):

    for kh, kw:                                           # 9 or 25 taps, unrolled
        w = weights[c_chunk, 0, kh, kw, 0, 0:x]           # one vector register
        for j in 0 .. reg_n:                              # unrolled: reg_n accumulators
            acc[j] += input[c_chunk, ih(kh), iw(j, kw), 0:x] * w

one vector FMA per input vector loaded, ``reg_n`` zmm accumulators per output row segment, the
bias / BatchNorm / ReLU6 / HardSwish epilogue applied to them before they are written back, and
(with kw and j unrolled, stride 1) the loads of neighbouring taps shared by LLVM. Output rows of
all channel chunks run in parallel.

Knobs the search explores: the register block ``reg_n`` on the output width (a tile decision the
cost model ranks and the mutator varies) and, as two sketches, where the zero padding happens —
a separate pass over the input before the conv (plain loads in the kernel), or inlined into the
kernel (no extra pass over memory, a select per tap). Which wins depends on the layer (small

The op itself (Relax call, weight packing, TE compute, legalization) is
``schedules/ops/depthwise.py``.
"""

from __future__ import annotations

from typing import ClassVar

from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.space_generator import SpaceGenerator
from tvm.target import Target

from ..ops.depthwise import DEPTHWISE_BLOCK, PAD_BLOCK, is_blocked_depthwise
from ..ops.nchwc import (
    MAX_REGISTER_BLOCK,
    conv_and_epilogue,
    epilogue_at,
    epilogue_fuses,
    padding_sketches,
    register_block_space,
    schedule_prologue,
)
from .base import ScheduleSpace

SPACE_NAME = "depthwise-nchwc"


def schedule_depthwise(
    sch: Schedule, *, inline_pad: bool, max_block: int = MAX_REGISTER_BLOCK
) -> None:
    """Apply the register-blocked depthwise schedule, sampling ``reg_n`` ≤ ``max_block``
    (in place)."""
    conv, output, prologue = conv_and_epilogue(sch, SPACE_NAME, DEPTHWISE_BLOCK)
    batch, chunk, oh, ow, lanes, kh, kw = sch.get_loops(conv)
    reg_n = sch.sample_perfect_tile(ow, n=2, max_innermost_factor=max_block)
    ow_outer, ow_inner = sch.split(ow, reg_n)
    sch.reorder(batch, chunk, oh, ow_outer, kh, kw, ow_inner, lanes)
    rows = sch.fuse(batch, chunk, oh)
    sch.parallel(rows)
    # kw and the register block unrolled: LLVM keeps the accumulators in zmm registers and, at
    # stride 1, loads an input vector once for the taps that share it.
    sch.unroll(kw)
    sch.unroll(ow_inner)
    sch.vectorize(lanes)
    epilogue_at(sch, output, ow_outer)
    sch.decompose_reduction(conv, kh)
    schedule_prologue(sch, prologue, inline_pad=inline_pad, pad_block=PAD_BLOCK)


def depthwise_sketches(sch: Schedule, max_block: int = MAX_REGISTER_BLOCK) -> list[Schedule]:
    """The two sketches of the space: padding as its own pass, and padding inlined."""
    return padding_sketches(sch, schedule_depthwise, PAD_BLOCK, max_block)


class DepthwiseConvSpace(ScheduleSpace):
    """Blocked depthwise convolutions: the register-blocked kernel above, 2-16 candidates per
    layer, searched alone first (``seed_trials``) and then in the union with the generic space."""

    name: ClassVar[str] = SPACE_NAME
    seed_trials: ClassVar[int] = 8

    def applies_to(self, mod: IRModule) -> bool:
        return is_blocked_depthwise(mod) and epilogue_fuses(mod, DEPTHWISE_BLOCK)

    def generator(self, target: Target) -> SpaceGenerator:
        return register_block_space(depthwise_sketches, target)
