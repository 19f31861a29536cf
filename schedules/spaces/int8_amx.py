"""Our space for integer convolutions on AMX tiles: ``tdpbusd`` register blocks (Sapphire Rapids
and later Xeons).

The op is ``schedules/ops/int8_amx.py``'s (u8 ``NCHW16c`` in, s32 out, a kernel row's columns
in one tile row); the kernel (``schedules/ops/amx.py``), for one block of ``m_tiles × rows``
pixels of an output row and ``n_tiles`` chunks of 16 output channels:

    tilezero the m_tiles × n_tiles accumulators
    for ic_outer, kh:
        for tm < m_tiles:
            tmm4/5 = input[ic_outer, ih(kh), rows of tm]           # rows × 16·taps bytes
            for tn < n_tiles:
                tmm6/7 = weights[ic_outer, kh, oc chunk tn]         # 4·taps × 64 bytes
                tdpbusd acc(tm, tn), tmm4/5, tmm6/7
    tilestored the accumulators → the conv's output (pixel-major); the epilogue requantizes
    them, vectorized over the 16 channels of a chunk

A ``tdpbusd`` whose accumulator the previous one wrote waits for it, so a block has several
accumulators, and each loaded tile serves several products. One design per (rows, m_tiles,
n_tiles): ``rows`` the widest divisor of the output width up to 16 (a tile's rows), at most
four accumulators. Declines output rows narrower than four pixels, a conv with no epilogue,
and a CPU without AMX-INT8.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import tvm_ffi
from tvm import ir
from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.space_generator import SpaceGenerator
from tvm.sym.pattern import detect_linear_equation
from tvm.target import Target

from ..ops.amx import MAX_ACCUMULATORS, AmxBlock, tile_rows
from ..ops.int8_amx import AMX_CONV_BLOCK, AMX_DATA_BLOCK
from ..ops.isa import has_amx_int8
from ..ops.nchwc import (
    block_names,
    conv_and_epilogue,
    design_copies,
    epilogue_at,
    epilogue_fuses,
    parallel_vectorize,
    register_block_space,
)
from .base import ScheduleSpace

SPACE_NAME = "int8-amx"


def amx_blocks(out_width: int, oc_chunks: int, stride: int = 1, taps: int = 1) -> list[AmxBlock]:
    """The register blocks of an output row ``out_width`` pixels wide and ``oc_chunks`` output
    channel chunks (see the module doc)."""
    rows = tile_rows(out_width)
    if rows is None:
        return []
    return [
        AmxBlock(rows, m, n, stride, taps)
        for m in range(1, MAX_ACCUMULATORS + 1)
        for n in range(1, MAX_ACCUMULATORS // m + 1)
        if out_width % (rows * m) == 0 and oc_chunks % n == 0
    ]


@dataclass(frozen=True)
class AmxConv:
    """What the space needs to know of a task's AMX conv."""

    out_width: int
    oc_chunks: int
    #: Input pixels between consecutive output pixels of a row.
    stride: int
    #: Input pixels of a tile row (``int8_amx.taps_of``).
    taps: int

    def blocks(self) -> list[AmxBlock]:
        return amx_blocks(self.out_width, self.oc_chunks, self.stride, self.taps)


def amx_conv(sch: Schedule) -> AmxConv | None:
    """The task's AMX conv, or None without one."""
    if AMX_CONV_BLOCK not in block_names(sch):
        return None
    block = sch.get(sch.get_sblock(AMX_CONV_BLOCK))
    data, weight = block.reads[0].source, block.reads[1].source
    loads: list[ir.TensorLoad] = []

    def on_load(load: ir.TensorLoad) -> None:
        if load.source.same_as(data):
            loads.append(load)

    tvm_ffi.structural_walk(block.body, (ir.TensorLoad, on_load))
    # The input column is ``ow · stride + row div 4``: its coefficient of ``ow``.
    coefficients = detect_linear_equation(loads[0].indices[3], [block.iter_vars[3].var])
    if len(coefficients) != 2:
        return None
    out = block.writes[0].source.shape
    taps = int(weight.shape[3]) * int(weight.shape[5]) // AMX_DATA_BLOCK
    return AmxConv(int(out[3]), int(out[1]), int(coefficients[0]), taps)


def _pixel_major(n: Any, c: Any, h: Any, w: Any, b: Any) -> tuple[Any, ...]:
    return (n, h, w, c, b)


@dataclass(frozen=True)
class AmxDesign:
    """One design: its register block, and whether output-channel blocks are the outer loop
    (each thread's output rows then reuse one block's weights from L2: the 7×7 convs of
    ResNet-50, whose weights are 2.4-3.1 MB, read them once per output row otherwise)."""

    block: AmxBlock
    channels_outer: bool


def schedule_amx_conv(sch: Schedule, design: AmxDesign) -> None:
    """One design of the int8-amx space (in place)."""
    amx = design.block
    init_intrin, update_intrin, store_intrin = amx.intrinsics()
    conv, output, prologue = conv_and_epilogue(sch, SPACE_NAME, AMX_CONV_BLOCK)
    n, oc_chunk, oh, ow, oc_block, ic_outer, kh, row, ic_lane = sch.get_loops(conv)
    oc_outer, oc_in = sch.split(oc_chunk, [None, amx.n_tiles])
    ow_outer, ow_in = sch.split(ow, [None, amx.pixels])
    inner = (ic_outer, kh, oc_in, ow_in, oc_block, row, ic_lane)
    if design.channels_outer:
        sch.reorder(n, oc_outer, oh, ow_outer, *inner)
        sch.parallel(sch.fuse(n, oc_outer, oh))
        block_loop = ow_outer
    else:
        sch.reorder(n, oh, ow_outer, oc_outer, *inner)
        sch.parallel(sch.fuse(n, oh, ow_outer))
        block_loop = oc_outer
    local = sch.cache_write(conv, 0, "local")
    # The accumulators of one block, and the conv's output the epilogue reads, pixel-major:
    # the rows of every output-channel tile of a pixel are one region (the intrinsics').
    sch.transform_layout(conv, ("write", 0), _pixel_major)
    sch.transform_layout(local, ("write", 0), _pixel_major)
    sch.reverse_compute_at(local, block_loop, preserve_unit_loops=True)
    epilogue_at(sch, output, block_loop)
    init = sch.decompose_reduction(conv, ic_outer)
    # With one output chunk the intrinsics start at the pixel loop (the chunk loop is a unit
    # loop their descriptions do not have).
    unit = amx.n_tiles == 1
    sch.tensorize(sch.get_loops(init)[-2 if unit else -3], init_intrin)
    sch.tensorize(sch.get_loops(conv)[-4 if unit else -5], update_intrin)
    # The copy's loops follow the conv's output axes (n, chunk, row, column, lane): the chunk
    # goes in, next to the pixels, so the store covers every tile of the block.
    *_, chunk, row_unit, pixel, lane = sch.get_loops(local)
    sch.reorder(row_unit, chunk, pixel, lane)
    sch.tensorize(pixel if unit else chunk, store_intrin)
    for block in prologue:
        parallel_vectorize(sch, block)


class Int8AmxConvSpace(ScheduleSpace):
    """Integer convolutions (conv2d_NCHWc_int8) as AMX tile register blocks (above)."""

    name: ClassVar[str] = SPACE_NAME
    #: Every design alone first (at most 6 blocks × 2 loop orders): they have no sampled knob,
    #: so the seed pass measures each once and the union search has nothing left here to find.
    seed_trials: ClassVar[int] = 12

    def available(self, target: Target) -> bool:
        return has_amx_int8(target)

    def applies_to(self, mod: IRModule) -> bool:
        sch = Schedule(mod)
        conv = amx_conv(sch)
        # The accumulators are stored pixel-major into the conv's output, which only an
        # intermediate buffer (read by an epilogue) may be: a QDQ conv always requantizes.
        if conv is None or block_names(sch)[-1] == AMX_CONV_BLOCK:
            return False
        return bool(conv.blocks()) and epilogue_fuses(mod, AMX_CONV_BLOCK)

    def _design(self, sch: Schedule, max_block: int = 0) -> list[Schedule]:
        conv = amx_conv(sch)
        assert conv is not None
        designs = [AmxDesign(block, outer) for block in conv.blocks() for outer in (False, True)]
        return design_copies(sch, designs, schedule_amx_conv)

    def generator(self, target: Target) -> SpaceGenerator:
        return register_block_space(self._design, target)


__all__ = [
    "SPACE_NAME", "AmxConv", "AmxDesign", "Int8AmxConvSpace", "amx_blocks", "amx_conv",
    "schedule_amx_conv",
]  # fmt: skip
