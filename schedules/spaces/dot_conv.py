"""The register-blocked dot-product conv, shared by the int8 (VNNI) and bf16 spaces.

The op (``schedules/ops/dot_conv.py``) lays the data out so one instruction computes sixteen
output channels over a group of ``g`` input channels (4 u8 for ``vpdpbusd``, 2 bf16 for
``vdpbf16ps``): a broadcast of ``g`` inputs against a 64-byte weight tile. The kernel, for one
output row segment:

    for ic_outer, kh, kw, ic_group:                   # a/g groups of g input channels
        w[c] = weights[oc_outer·oc_inner + c, ic_outer, kh, kw, ic_group]   # c < oc_inner
        for j in 0 .. ow_inner:                        # unrolled
            x = broadcast(input[ic_outer, ih(kh), iw(j, kw), g·ic_group : g·ic_group + g])
            acc[j, c] = dot(acc[j, c], x, w[c])        # c < oc_inner, unrolled

Accumulators stay in registers (``accumulate_locally``) and the epilogue (int8: scale, bias,
activation, requantization to u8; bf16: bias, activation, the next conv's cast to bf16) runs on
them once per segment. Knobs: the output-channel chunks per block (one design per value) and the
columns (a sampled tile), so at most the target's accumulator count.
"""

from __future__ import annotations

from functools import partial
from typing import ClassVar

from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.space_generator import SpaceGenerator
from tvm.target import Target

from ..ops.dot_conv import DotFormat
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
from .base import ScheduleSpace

#: Output-channel chunks (16 lanes each) per register block.
OC_BLOCKS = (1, 2, 4)


def schedule_dot_conv(
    sch: Schedule,
    space: str,
    fmt: DotFormat,
    intrin: str,
    oc_inner: int,
    max_block: int = MAX_REGISTER_BLOCK,
) -> None:
    """Tile the ``fmt`` conv into an ``oc_inner`` × sampled-columns block of accumulators, its
    innermost dot product tensorized with ``intrin`` (in place)."""
    conv, output, prologue = conv_and_epilogue(sch, space, fmt.block)
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
    sch.tensorize(sch.get_loops(conv)[-2], intrin)
    for block in prologue:
        parallel_vectorize(sch, block)


class DotConvSpace(ScheduleSpace):
    """Convs of one :class:`DotFormat` as register blocks of its dot instruction (above)."""

    fmt: ClassVar[DotFormat]
    #: The tensor intrinsic of the innermost (oc_block, ic_lane) pair.
    intrin: ClassVar[str]
    seed_trials: ClassVar[int] = 8

    def schedule(self, sch: Schedule, oc_inner: int, max_block: int = MAX_REGISTER_BLOCK) -> None:
        """One design of this space on ``sch`` (in place)."""
        schedule_dot_conv(sch, self.name, self.fmt, self.intrin, oc_inner, max_block)

    def _design(self, sch: Schedule, max_block: int = MAX_REGISTER_BLOCK) -> list[Schedule]:
        chunks = int(sch.get(sch.get_loops(sch.get_sblock(self.fmt.block))[1]).extent)
        blocks = [c for c in OC_BLOCKS if chunks % c == 0]
        return design_copies(
            sch, blocks, lambda copy, c: self.schedule(copy, c, max_block=max_block)
        )

    def applies_to(self, mod: IRModule) -> bool:
        return self.fmt.block in block_names(Schedule(mod)) and epilogue_fuses(mod, self.fmt.block)

    def generator(self, target: Target) -> SpaceGenerator:
        return register_block_space(partial(self._design), target)
