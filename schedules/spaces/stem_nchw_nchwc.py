"""Convolutions with few input channels (the 7×7 stride-2 RGB stem): NCHW in, NCHW[x]c out.

Such a conv cannot be blocked on its input (3 % 16 != 0), and in NCHW the generic space found
no good schedule for ResNet-50's stem in 16 trials: 0.19× onnxruntime, the layer furthest from it
(per-layer benchmark, README). Here the input stays NCHW (no transform, no channel padding that
would multiply zeros) and only the output is blocked, as in MLAS's NCHWc convolution for the first
layer: the weights are packed at build time to ``OIHW{x}o`` (``(O/x, I, KH, KW, x)``), so one
weight vector holds ``x`` output channels of one input channel and tap, and the output is
``NCHW{x}c`` like every blocked conv after it (the layout pass, ``layout.py``, carries it on).

The kernel of this space is the 2-D register block of ``nchwc_conv2d.py`` with the input-channel
loop (3 iterations) unrolled whole, and optionally the window's column loop too::

    for kh, [kw]:                                   # kw unrolled or not (a design space)
        for ic in 0..C (unrolled):
            w[c] = weights[oc_outer·oc_inner + c, ic, kh, kw, 0:x]
            for j (unrolled): acc[c, j] += broadcast(input[ic, row·s + kh, (col + j)·s + kw]) * w[c]

The op itself (Relax call, weight packing, TE compute, legalization) is ``schedules/ops/stem.py``.
"""

from __future__ import annotations

from functools import partial
from itertools import product
from typing import ClassVar

from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.space_generator import SpaceGenerator
from tvm.target import Target

from ..ops.nchwc import (
    MAX_REGISTER_BLOCK,
    conv_and_epilogue,
    design_copies,
    epilogue_fuses,
    register_block_space,
)
from ..ops.register_block import OC_BLOCKS, ORDERS, RegisterBlock, schedule_register_block
from ..ops.stem import STEM_BLOCK, stem_loops
from .base import ScheduleSpace

SPACE_NAME = "stem-nchw-nchwc"


def schedule_stem_conv(
    sch: Schedule, block: RegisterBlock, max_block: int = MAX_REGISTER_BLOCK
) -> None:
    """Apply this space's schedule for ``block`` (in place), sampling the column block."""
    conv, output, prologue = conv_and_epilogue(sch, SPACE_NAME, STEM_BLOCK)
    ic = int(sch.get(sch.get_loops(conv)[5]).extent)
    schedule_register_block(sch, conv, output, block, ic_block=ic, max_block=max_block)
    for pad in prologue:
        # NCHW padding of a few channels: whole rows copied in parallel (its rows are not a
        # multiple of the vector width; it is ~1% of the conv's time).
        loops = sch.get_loops(pad)
        sch.parallel(sch.fuse(*loops[:-1]))


def design_spaces(sch: Schedule, max_block: int = MAX_REGISTER_BLOCK) -> list[Schedule]:
    loops = stem_loops(sch.mod)
    assert loops is not None
    blocks = [
        RegisterBlock(oc, 1, order, unroll_window)
        for oc, order, unroll_window in product(OC_BLOCKS, ORDERS, (False, True))
        if loops["oc_chunk"] % oc == 0
    ]
    return design_copies(sch, blocks, partial(schedule_stem_conv, max_block=max_block))


class StemConvSpace(ScheduleSpace):
    """Convs compiled NCHW in, NCHW[x]c out (few input channels): the register block above,
    one design space per (output-channel chunks, outer order, unrolled window column)."""

    name: ClassVar[str] = SPACE_NAME
    seed_trials: ClassVar[int] = 8

    def applies_to(self, mod: IRModule) -> bool:
        return stem_loops(mod) is not None and epilogue_fuses(mod, STEM_BLOCK)

    def generator(self, target: Target) -> SpaceGenerator:
        return register_block_space(design_spaces, target)
