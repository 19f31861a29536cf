"""Our space for integer convolutions: a register-blocked u8×s8→s32 conv on AVX-512 VNNI.

The op (``schedules/ops/int8.py``) lays the data out so one ``vpdpbusd`` computes sixteen output
channels over four input channels: a broadcast of four u8 inputs against a 64-byte s8 weight tile.
The kernel, for one output row segment:

    for ic_outer, kh, kw, ic_group:                   # a/4 groups of 4 input channels
        w[c] = weights[oc_outer·oc_inner + c, ic_outer, kh, kw, ic_group]   # c < oc_inner
        for j in 0 .. ow_inner:                        # unrolled
            x = broadcast(input[ic_outer, ih(kh), iw(j, kw), 4·ic_group : 4·ic_group + 4])
            acc[j, c] = vpdpbusd(acc[j, c], x, w[c])   # c < oc_inner, unrolled

Accumulators stay in registers (``accumulate_locally``) and the requantization epilogue (scale,
bias, ReLU/Clip/SiLU, round, zero point, clamp to u8) runs on them once per segment. Knobs: the
output-channel chunks per block (one design per value) and the columns (a sampled tile), so at
most the target's accumulator count. The space declines on a CPU without VNNI: the job never
builds integer convs there (``tuner/graph/quantized.py``).
"""

from __future__ import annotations

from functools import partial
from typing import ClassVar

from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.space_generator import SpaceGenerator
from tvm.target import Target

from ..ops.int8 import INT8_CONV_BLOCK
from ..ops.isa import has_vnni
from ..ops.nchwc import (
    MAX_REGISTER_BLOCK,
    accumulate_locally,
    block_names,
    conv_and_epilogue,
    design_copies,
    epilogue_at,
    epilogue_fuses,
    parallel_vectorize,
    register_block_space,
)
from ..ops.vnni import VNNI_LOCAL_INTRIN
from .base import ScheduleSpace

SPACE_NAME = "int8-vnni"
#: Output-channel chunks (16 lanes each) per register block.
OC_BLOCKS = (1, 2, 4)


def schedule_int8_conv(sch: Schedule, oc_inner: int, max_block: int = MAX_REGISTER_BLOCK) -> None:
    """Tile the integer conv into an ``oc_inner`` × sampled-columns block of ``vpdpbusd``
    accumulators (in place)."""
    conv, output, prologue = conv_and_epilogue(sch, SPACE_NAME, INT8_CONV_BLOCK)
    n, oc_chunk, oh, ow, oc_block, ic_outer, kh, kw, ic_group, ic_lane = sch.get_loops(conv)
    oc_outer, oc_in = sch.split(oc_chunk, [None, oc_inner])
    columns = sch.sample_perfect_tile(ow, n=2, max_innermost_factor=max(1, max_block // oc_inner))
    ow_outer, ow_in = sch.split(ow, columns)
    sch.reorder(oc_outer, oh, ow_outer, ic_outer, kh, kw, ic_group, ow_in, oc_in, oc_block, ic_lane)
    sch.parallel(sch.fuse(n, oc_outer, oh))
    sch.unroll(ow_in)
    sch.unroll(oc_in)
    accumulate_locally(sch, conv, ow_outer)
    epilogue_at(sch, output, ow_outer)
    init = sch.decompose_reduction(conv, ic_outer)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.tensorize(sch.get_loops(conv)[-2], VNNI_LOCAL_INTRIN)
    for block in prologue:
        parallel_vectorize(sch, block)


def _design(sch: Schedule, max_block: int = MAX_REGISTER_BLOCK) -> list[Schedule]:
    chunks = int(sch.get(sch.get_loops(sch.get_sblock(INT8_CONV_BLOCK))[1]).extent)
    blocks = [c for c in OC_BLOCKS if chunks % c == 0]
    return design_copies(
        sch, blocks, lambda copy, c: schedule_int8_conv(copy, c, max_block=max_block)
    )


class Int8VnniConvSpace(ScheduleSpace):
    """Integer convolutions (conv2d_NCHWc_int8) as ``vpdpbusd`` register blocks (above)."""

    name: ClassVar[str] = SPACE_NAME
    seed_trials: ClassVar[int] = 8

    def applies_to(self, mod: IRModule) -> bool:
        return INT8_CONV_BLOCK in block_names(Schedule(mod)) and epilogue_fuses(
            mod, INT8_CONV_BLOCK
        )

    def generator(self, target: Target) -> SpaceGenerator:
        return register_block_space(partial(_design), target)

    def available(self, target: Target) -> bool:
        return has_vnni(target)
