"""A 2-D register block for blocked convolutions: several output-channel chunks (and rows) per
microkernel, so each loaded input value and weight vector feeds more FMAs.

The register-blocked space (``nchwc_conv.py``) keeps ``reg_n`` accumulators of one output-channel
chunk: per input channel it loads one weight vector and broadcasts ``reg_n`` inputs, one FMA
each. A 1×1 convolution does only ``Cin`` FMAs per output vector, with no kernel window to reuse
the broadcast input, and at 56×56 the per-layer benchmark measured it at 0.61-0.73× onnxruntime.
A 3×3 convolution on a 7×7 or 14×14 map has too few columns for a long 1-D block (7 at most at
7×7): ResNet-50's 512→512 3×3 at 7×7 ran at 63% of peak, 0.93× onnxruntime (2026-11-30, Zen 5).
This space blocks the accumulators over ``oc_inner`` output-channel chunks × ``oh_inner`` rows ×
``ow_inner`` columns (≤ 28 zmm registers): per input channel and window tap it loads
``oc_inner`` weight vectors and broadcasts ``oh_inner·ow_inner`` inputs, each broadcast feeding
``oc_inner`` FMAs (MLAS's NCHWc kernels use the same shape: 4 output blocks × 6 columns on
AVX-512)::

    for ic_outer, kh, kw, ic_inner:
        w[c] = weights[oc_outer·oc_inner + c, ic, kh, kw, 0:16]       for c < oc_inner
        for r, j:                                                     # unrolled
            x = broadcast(input[ic, (row + r)·s + kh, (col + j)·s + kw])
            acc[c, r, j] += x * w[c]                                   for c < oc_inner

The output-channel chunk is the innermost unrolled loop, so one broadcast is live at a time
beside the ``oc_inner`` weight vectors. With the chunk outermost instead, LLVM keeps every
broadcast of the block live across the chunks (``oh_inner·ow_inner`` registers more) and spills
the accumulators: on an Ice Lake Xeon (2026-12-01, weights flushed) ResNet-50's 2048→512 1×1 at
7×7 with 4 chunks × 7 columns ran 1.60 ms with the chunk outermost and 0.89 with it innermost,
512→512 3×3 at 7×7 3.15 and 1.81, 256→256 3×3 at 14×14 with 2 chunks × 2 rows × 7 columns 3.51
and 1.29 (onnxruntime 1.16, warm).

Knobs: ``oc_inner`` and ``oh_inner`` (one design space per pair, so their product bounds
``ow_inner``), ``ow_inner`` (a sampled tile, which the cost model ranks and the mutator varies),
and the outer order (output-channel groups outermost: the weights of a group stay in L1 while
all rows stream through; or rows outermost: one input row stays in L1/L2 for every group).
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
    conv_extents,
    design_copies,
    epilogue_fuses,
    input_channel_block,
    parallel_vectorize,
    register_block_space,
)
from ..ops.register_block import (
    ORDERS,
    RegisterBlock,
    block_shapes,
    schedule_register_block,
)
from .base import ScheduleSpace

SPACE_NAME = "nchwc-regblock2d"


def register_blocks(oc_chunks: int, rows: int) -> list[tuple[int, int]]:
    """The (oc_inner, oh_inner) pairs of the space for a layer (``block_shapes``), but
    (1, 1), which is the 1-D register block of ``nchwc_conv.py``."""
    return [block for block in block_shapes(oc_chunks, rows) if block != (1, 1)]


def schedule_conv_2d_block(
    sch: Schedule, block: RegisterBlock, max_block: int = MAX_REGISTER_BLOCK
) -> None:
    """Apply the 2-D register-blocked schedule of this space (in place)."""
    conv, output, prologue = conv_and_epilogue(sch, SPACE_NAME)
    schedule_register_block(
        sch, conv, output, block, ic_block=input_channel_block(sch, conv), max_block=max_block
    )
    for prologue_block in prologue:
        parallel_vectorize(sch, prologue_block)


def design_spaces(sch: Schedule, max_block: int = MAX_REGISTER_BLOCK) -> list[Schedule]:
    extents = conv_extents(sch.mod)
    assert extents is not None
    blocks = [
        RegisterBlock(oc_inner, oh_inner, order)
        for (oc_inner, oh_inner), order in product(
            register_blocks(extents["oc_chunk"], extents["oh"]), ORDERS
        )
    ]
    return design_copies(sch, blocks, partial(schedule_conv_2d_block, max_block=max_block))


class RegisterBlock2DConvSpace(ScheduleSpace):
    """Blocked convolutions (any window, stride, dilation, groups): the 2-D register block
    above, one design space per (oc_inner, oh_inner, order); a few dozen distinct schedules per
    layer."""

    name: ClassVar[str] = SPACE_NAME
    seed_trials: ClassVar[int] = 8

    def applies_to(self, mod: IRModule) -> bool:
        extents = conv_extents(mod)
        return (
            extents is not None
            and bool(register_blocks(extents["oc_chunk"], extents["oh"]))
            and epilogue_fuses(mod)
        )

    def seeds_first(self, mod: IRModule) -> bool:
        """Every conv it applies to: a short search that seeds the 1-D block first may never
        reach this space (PP-OCRv6 small det, AMX Xeon, 10 minutes: its 48→24 stride-2 3×3 at
        160² got 11 trials of the 1-D block, 1.08 ms, none of this one, against onnxruntime's
        0.63). Over the 1,604 convs of every report in ``bench/reports`` (2026-11-29 to
        2026-12-07) with both measured, this one was faster on 1,146: 1×1 at ≤ 14² 506 of
        676 (median time 0.79× the 1-D block's), 3×3 at ≤ 14² 110 of 144 (0.83×), 3×3 at
        15² to 56² 128 of 181 (0.88×), 3×3 above 56² 21 of 36 (0.99×)."""
        return conv_extents(mod) is not None

    def generator(self, target: Target) -> SpaceGenerator:
        return register_block_space(design_spaces, target)
