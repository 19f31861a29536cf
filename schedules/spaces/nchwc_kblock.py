"""A reduction-blocked direct conv for blocked convolutions with many input channels: the input
channels split into chunks outside the spatial tiles, so one chunk's weights stay in L1 while
every tile of the rows a thread owns streams through.

The 2-D register block (``nchwc_conv2d.py``) runs the whole reduction inside each output tile:
per tile it reads every input channel's weights for its output-channel group. At 1024 input
channels and 4 chunks of 16 outputs that is 256 KiB per tile, so the weights stream from L2 (or
beyond) once per tile. Here each chunk of ``ic_chunk`` input-channel blocks is finished over all
the thread's tiles before the next starts; the accumulators go back to memory between chunks
(the output region of a thread's group, which stays in L1/L2)::

    parallel for oc_outer, oh_par:
        out[group, rows] = 0
        for chunk in ic_chunks:                         # a chunk's weights stay in L1
            for row, col (the tiles of the rows):
                acc = out[tile]                         # registers
                for ic in chunk, kh, kw, ic_inner:
                    for r, j: x = broadcast(input[...]); acc[c, r, j] += x * w[c]
                out[tile] = acc
        epilogue(out[group, rows])                      # bias, ReLU, residual: once

Measured on an Ice Lake Xeon (2026-12-01, 2 threads, weights flushed before each run, fixed
knobs against the 2-D block's best of the same): 1024→256 1×1 at 14×14 0.725 ms against 0.830,
2048→512 1×1 at 7×7 0.77 against 0.89, 512→512 3×3 at 7×7 1.59 against 1.78; at 56×56 with 256
input channels it lost (0.69 against 0.56), so the space is offered from ``MIN_INPUT_BLOCKS``
input-channel blocks on and the search decides per layer. In a cold 30-minute ResNet-50 search
on the same machine it was the fastest space on 9 of the 10 convs it applies to, by 8-25%
(``bench/reports/2026-12-01-resnet50-icx-kblock-30.md``).

Knobs: ``oc_inner`` and ``oh_inner`` (one design space per pair), three sampled tiles (the
columns of the register block, how the row tiles split between the parallel loop and the
chunk's sweep, and how many input-channel blocks a chunk has), and how many chunks ahead the
weights are prefetched during the sweep (0-2, ``prefetch.py``: 0.80 against 0.95 ms for the
512×7×7 3×3 conv with weights from memory).
"""

from __future__ import annotations

from typing import ClassVar

from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.space_generator import SpaceGenerator
from tvm.target import Target

from ..ops.annotations import sample_weight_prefetch
from ..ops.nchwc import (
    CONV_BLOCK,
    MAX_REGISTER_BLOCK,
    conv_and_epilogue,
    conv_extents,
    design_copies,
    epilogue_at,
    epilogue_fuses,
    input_channel_block,
    parallel_vectorize,
    register_block_space,
)
from ..ops.register_block import block_shapes, split_columns
from .base import ScheduleSpace

SPACE_NAME = "nchwc-kblock"
#: Input-channel blocks a conv needs for this space (512 channels in blocks of 16): below it the
#: whole reduction's weights of a group fit in L2 and the chunks only add accumulator traffic.
MIN_INPUT_BLOCKS = 32
#: The most input-channel blocks in one chunk: 256 channels, whose weights for 4 output chunks of
#: a 1×1 conv are 64 KiB (the measured best chunks were 4-16 blocks).
MAX_CHUNK_BLOCKS = 16
#: The most row tiles one chunk sweeps before the next chunk starts (ResNets have at most 56).
MAX_SWEEP_ROWS = 64
#: The tile limits of this space's sampled tiles other than the register block's columns.
SWEEP_LIMITS = (MAX_CHUNK_BLOCKS, MAX_SWEEP_ROWS)


def schedule_reduction_blocked(
    sch: Schedule, oc_inner: int, oh_inner: int, max_block: int = MAX_REGISTER_BLOCK
) -> None:
    """Apply the reduction-blocked schedule with an ``oc_inner`` × ``oh_inner`` × (sampled
    columns) register block of at most ``max_block`` accumulators (in place)."""
    conv, output, prologue = conv_and_epilogue(sch, SPACE_NAME)
    ic_block = input_channel_block(sch, conv)
    n, oc_chunk, oh, ow, oc_block, ic, kh, kw = sch.get_loops(conv)
    oc_outer, oc_in = sch.split(oc_chunk, [None, oc_inner])
    oh_outer, oh_in = sch.split(oh, [None, oh_inner])
    sweep = sch.sample_perfect_tile(oh_outer, n=2, max_innermost_factor=MAX_SWEEP_ROWS)
    oh_par, oh_seq = sch.split(oh_outer, sweep)
    ow_outer, ow_in = split_columns(sch, ow, max(1, max_block // (oc_inner * oh_inner)))
    ic_blocks, ic_inner = sch.split(ic, [None, ic_block])
    chunk = sch.sample_perfect_tile(ic_blocks, n=2, max_innermost_factor=MAX_CHUNK_BLOCKS)
    ic_chunk, ic_in = sch.split(ic_blocks, chunk)
    sch.reorder(
        oc_outer, oh_par, ic_chunk, oh_seq, ow_outer, ic_in, kh, kw, ic_inner,
        oh_in, ow_in, oc_in, oc_block,
    )  # fmt: skip
    # The next chunk's weights stream in while this chunk's sweep runs (prefetch.py).
    sample_weight_prefetch(sch, conv, ic_chunk)
    threads = sch.fuse(n, oc_outer, oh_par)
    sch.parallel(threads)
    for loop in (oh_in, ow_in, oc_in):
        sch.unroll(loop)
    sch.vectorize(oc_block)
    # After the last chunk: the epilogue reads the group's finished sums once.
    epilogue_at(sch, output, threads)
    sch.decompose_reduction(conv, ic_chunk)
    for block in prologue:
        parallel_vectorize(sch, block)


def design_spaces(sch: Schedule, max_block: int = MAX_REGISTER_BLOCK) -> list[Schedule]:
    extents = conv_extents(sch.mod)
    assert extents is not None
    return design_copies(
        sch,
        block_shapes(extents["oc_chunk"], extents["oh"]),
        lambda copy, block: schedule_reduction_blocked(copy, *block, max_block=max_block),
    )


def input_blocks(mod: IRModule) -> int:
    """How many input-channel blocks the task's blocked conv reduces over (0 without one)."""
    extents = conv_extents(mod)
    if extents is None:
        return 0
    sch = Schedule(mod)
    block = sch.get_sblock(CONV_BLOCK)
    return extents["ic"] // input_channel_block(sch, block)


class ReductionBlockedConvSpace(ScheduleSpace):
    """Blocked convolutions with at least ``MIN_INPUT_BLOCKS`` input-channel blocks: the
    reduction-blocked kernel above, one design space per (oc_inner, oh_inner)."""

    name: ClassVar[str] = SPACE_NAME
    seed_trials: ClassVar[int] = 8

    def applies_to(self, mod: IRModule) -> bool:
        return input_blocks(mod) >= MIN_INPUT_BLOCKS and epilogue_fuses(mod)

    def generator(self, target: Target) -> SpaceGenerator:
        return register_block_space(design_spaces, target)
