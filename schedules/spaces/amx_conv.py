"""Our spaces for convolutions on AMX tiles: ``tdpbusd`` (int8-amx) and ``tdpbf16ps``
(bf16-amx) register blocks (Sapphire Rapids and later Xeons).

The op is ``schedules/ops/amx_conv.py``'s (u8 or bf16 ``NCHW16c`` in, s32 or fp32 out, a
kernel row's columns in one or two tile rows); the kernel (``schedules/ops/amx.py``), for one
block of ``m_tiles × rows`` pixels of an output row and ``n_tiles`` chunks of 16 output
channels:

    tilezero the m_tiles × n_tiles accumulators
    for ic_outer, kh, kw_step:
        for tm < m_tiles:
            tmm4/5 = input[ic_outer, ih(kh), rows of tm]           # rows × 64 bytes (taps > 1)
            for tn < n_tiles:
                tmm6/7 = weights[ic_outer, kh, step, oc chunk tn]   # 16 × 64 bytes
                tdpbusd/tdpbf16ps acc(tm, tn), tmm4/5, tmm6/7
    tilestored the accumulators → the conv's output (pixel-major); the epilogue requantizes
    them (int8) or adds the bias and activation and rounds to bf16 for the next conv, vectorized
    over the 16 channels of a chunk

A ``tdpbusd`` whose accumulator the previous one wrote waits for it, so a block has several
accumulators, and each loaded tile serves several products. One design per (rows, m_tiles,
n_tiles): ``rows`` the widest divisor of the output width up to 16 (a tile's rows), at most
four accumulators. An ``NCHW64c`` output (``tuner/graph/tile_blocks.py``) holds four tiles a
block: the schedule makes them an iterator of the conv, and a register block takes 1, 2 or 4.
Declines output rows narrower than four pixels, a conv with no epilogue, and a CPU without the
format's AMX product (AMX-INT8, AMX-BF16).
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

from ..ops.amx import AMX_N, MAX_ACCUMULATORS, AmxBlock, tile_rows
from ..ops.amx_conv import AMX_CONV_BLOCKS, AMX_DATA_BLOCK
from ..ops.dot_conv import BF16, INT8, DotFormat, format_of_data
from ..ops.isa import amx_precisions
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


def amx_blocks(
    out_width: int,
    oc_chunks: int,
    stride: int = 1,
    taps: int = 1,
    fmt: DotFormat = INT8,
    pixel_channels: int = AMX_DATA_BLOCK,
    out_block: int = AMX_N,
) -> list[AmxBlock]:
    """The register blocks of an output row ``out_width`` pixels wide and ``oc_chunks`` output
    channel chunks of 16 (see the module doc), in ``NCHW{out_block}c``: a block's chunks lie in
    one output block."""
    rows = tile_rows(out_width)
    if rows is None:
        return []
    tiles = out_block // AMX_N
    return [
        AmxBlock(rows, m, n, stride, taps, fmt, pixel_channels)
        for m in range(1, MAX_ACCUMULATORS + 1)
        for n in range(1, MAX_ACCUMULATORS // m + 1)
        if out_width % (rows * m) == 0 and oc_chunks % n == 0 and (tiles == 1 or tiles % n == 0)
    ]


@dataclass(frozen=True)
class AmxConv:
    """What the space needs to know of a task's AMX conv."""

    out_width: int
    oc_chunks: int
    #: Input pixels between consecutive output pixels of a row.
    stride: int
    #: Input pixels of a tile row (``amx_conv.taps_of``).
    taps: int
    fmt: DotFormat = INT8
    #: Channels of an input pixel: 16 or 64, or 4 for the stem (``amx_conv.STEM_DATA_BLOCK``).
    pixel_channels: int = AMX_DATA_BLOCK
    #: Channels of an output block: 16 or 64.
    out_block: int = AMX_N

    @property
    def block_name(self) -> str:
        return AMX_CONV_BLOCKS[self.fmt]

    def blocks(self) -> list[AmxBlock]:
        return amx_blocks(
            self.out_width,
            self.oc_chunks,
            self.stride,
            self.taps,
            self.fmt,
            self.pixel_channels,
            self.out_block,
        )


def amx_conv(sch: Schedule) -> AmxConv | None:
    """The task's AMX conv, or None without one."""
    names = block_names(sch)
    name = next((n for n in AMX_CONV_BLOCKS.values() if n in names), None)
    if name is None:
        return None
    block = sch.get(sch.get_sblock(name))
    data, weight = block.reads[0].source, block.reads[1].source
    fmt = format_of_data(str(data.dtype))
    assert fmt is not None
    loads: list[ir.TensorLoad] = []

    def on_load(load: ir.TensorLoad) -> None:
        if load.source.same_as(data):
            loads.append(load)

    tvm_ffi.structural_walk(block.body, (ir.TensorLoad, on_load))
    # The input column is ``ow · stride + step · taps + row div (16/g)``: its coefficient of ow.
    coefficients = detect_linear_equation(loads[0].indices[3], [block.iter_vars[3].var])
    if len(coefficients) != 2:
        return None
    out = block.writes[0].source.shape
    channels = int(data.shape[-1])
    taps = int(weight.shape[4]) * int(weight.shape[6]) // channels
    out_block = int(out[4])
    oc_chunks = int(out[1]) * out_block // AMX_N
    return AmxConv(int(out[3]), oc_chunks, int(coefficients[0]), taps, fmt, channels, out_block)


def _pixel_major(n: Any, c: Any, h: Any, w: Any, b: Any) -> tuple[Any, ...]:
    """``NCHW16c`` with the chunks inside the pixels: a block's tiles are one region."""
    return (n, h, w, c, b)


def _tiled(n: Any, c: Any, h: Any, w: Any, b: Any) -> tuple[Any, ...]:
    """``NCHW64c`` with its blocks' 16-channel tiles as an axis: a register block's tiles are
    one region as they are (its chunks lie in one block)."""
    return (n, c, h, w, b // AMX_N, b % AMX_N)


def _tiled_copy(n: Any, c: Any, h: Any, w: Any, b: Any) -> tuple[Any, ...]:
    """The output copy's iterators with the block's tiles as one of them, before the pixels
    (the intrinsics' order: chunk, pixel, lane)."""
    return (n, c, b // AMX_N, h, w, b % AMX_N)


def _tiled_iterators(
    n: Any, c: Any, h: Any, w: Any, b: Any, ic: Any, kh: Any, step: Any, row: Any, lane: Any
) -> tuple[Any, ...]:
    """The conv block's iterators: :func:`_tiled_copy`'s, then the reduction's."""
    return (*_tiled_copy(n, c, h, w, b), ic, kh, step, row, lane)


@dataclass(frozen=True)
class AmxDesign:
    """One design: its register block, and whether output-channel blocks are the outer loop
    (each thread's output rows then reuse one block's weights from L2: the 7×7 convs of
    ResNet-50, whose weights are 2.4-3.1 MB, read them once per output row otherwise)."""

    block: AmxBlock
    channels_outer: bool


def schedule_amx_conv(sch: Schedule, design: AmxDesign) -> None:
    """One design of an AMX space (in place)."""
    amx = design.block
    init_intrin, update_intrin, store_intrin = amx.intrinsics()
    space = _SPACE_NAMES[amx.fmt]
    conv, output, prologue = conv_and_epilogue(sch, space, AMX_CONV_BLOCKS[amx.fmt])
    tiled_blocks = int(sch.get(sch.get_loops(conv)[4]).extent) > AMX_N
    if tiled_blocks:  # NCHW64c out: the block's tiles an iterator (the intrinsics' chunks)
        sch.transform_block_layout(conv, _tiled_iterators)
        n, oc_chunk, tile, oh, ow, oc_block, ic_outer, kh, step, row, ic_lane = sch.get_loops(conv)
        tile_outer, oc_in = sch.split(tile, [None, amx.n_tiles])
        chunk_loops = [oc_chunk, tile_outer]
    else:
        n, oc_chunk, oh, ow, oc_block, ic_outer, kh, step, row, ic_lane = sch.get_loops(conv)
        oc_outer, oc_in = sch.split(oc_chunk, [None, amx.n_tiles])
        chunk_loops = [oc_outer]
    ow_outer, ow_in = sch.split(ow, [None, amx.pixels])
    inner = (ic_outer, kh, step, oc_in, ow_in, oc_block, row, ic_lane)
    if design.channels_outer:
        sch.reorder(n, *chunk_loops, oh, ow_outer, *inner)
        sch.parallel(sch.fuse(n, *chunk_loops, oh))
        block_loop = ow_outer
    else:
        sch.reorder(n, oh, ow_outer, *chunk_loops, *inner)
        sch.parallel(sch.fuse(n, oh, ow_outer))
        block_loop = chunk_loops[-1]
    local = sch.cache_write(conv, 0, "local")
    # The accumulators of one block, and the conv's output the epilogue reads, with the rows
    # of every output-channel tile of a pixel one region (the intrinsics').
    pixel_major = _tiled if tiled_blocks else _pixel_major
    sch.transform_layout(conv, ("write", 0), pixel_major)
    sch.transform_layout(local, ("write", 0), pixel_major)
    if tiled_blocks:  # the copy's iterators as the conv's: (n, block, tile, row, column, lane)
        sch.transform_block_layout(local, _tiled_copy)
    sch.reverse_compute_at(local, block_loop, preserve_unit_loops=True)
    epilogue_at(sch, output, block_loop, AMX_N)
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


class AmxConvSpace(ScheduleSpace):
    """The AMX convs of one dot format as tile register blocks (above)."""

    fmt: ClassVar[DotFormat]
    #: Every design alone first (at most 6 blocks × 2 loop orders): they have no sampled knob,
    #: so the seed pass measures each once and the union search has nothing left here to find.
    seed_trials: ClassVar[int] = 12

    def available(self, target: Target) -> bool:
        return self.fmt.precision in amx_precisions(target)

    def applies_to(self, mod: IRModule) -> bool:
        sch = Schedule(mod)
        conv = amx_conv(sch)
        if conv is None or conv.fmt is not self.fmt:
            return False
        # The accumulators are stored pixel-major into the conv's output, which only an
        # intermediate buffer (read by an epilogue) may be: a QDQ conv always requantizes, a
        # bf16 conv has its bias and the rounding for the next conv.
        if block_names(sch)[-1] == conv.block_name:
            return False
        return bool(conv.blocks()) and epilogue_fuses(mod, conv.block_name)

    def _design(self, sch: Schedule, max_block: int = 0) -> list[Schedule]:
        conv = amx_conv(sch)
        assert conv is not None
        designs = [AmxDesign(block, outer) for block in conv.blocks() for outer in (False, True)]
        return design_copies(sch, designs, schedule_amx_conv)

    def generator(self, target: Target) -> SpaceGenerator:
        return register_block_space(self._design, target)


class Int8AmxConvSpace(AmxConvSpace):
    """Integer convolutions (u8 × s8 → s32, ``tdpbusd``)."""

    name: ClassVar[str] = "int8-amx"
    fmt: ClassVar[DotFormat] = INT8


class Bf16AmxConvSpace(AmxConvSpace):
    """``--precision bf16`` convolutions (bf16 × bf16 → fp32, ``tdpbf16ps``)."""

    name: ClassVar[str] = "bf16-amx"
    fmt: ClassVar[DotFormat] = BF16


_SPACE_NAMES = {space.fmt: space.name for space in (Int8AmxConvSpace, Bf16AmxConvSpace)}


__all__ = [
    "AmxConv", "AmxConvSpace", "AmxDesign", "Bf16AmxConvSpace", "Int8AmxConvSpace",
    "amx_blocks", "amx_conv", "schedule_amx_conv",
]  # fmt: skip
