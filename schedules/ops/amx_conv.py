"""The convs of AMX targets, u8 × s8 → s32 (``tdpbusd``) and bf16 × bf16 → fp32 (``tdpbf16ps``):
the weight laid out for tile register blocks, and consecutive kernel columns packed into one
64-byte tile row.

An AMX product costs the same 16 cycles whether a tile row holds 16 or 64 bytes (``amx.py``).
In ``NCHW16c`` one pixel's 16 input channels are 16 bytes of u8 or 32 of bf16, so one tile row
holds the channels of four (u8) or two (bf16) consecutive input pixels: as many kernel columns
at that output pixel (``taps``). A conv 2 or more columns wide packs its columns into the
reduction in ``steps`` tile rows of ``taps`` columns each (``step · taps + tap`` is the column,
columns past the kernel's zero): u8 3×3 is one step of 4 columns, bf16 3×3 two steps of 2
(with their 4th column zero: 2 products a kernel row where 16-channel rows would take 3). A
1-column kernel keeps one-pixel tile rows (``taps`` = 1). The compute reads up to ``steps ·
taps - KW`` pixels past the last column the conv needs; the data is padded on the right by as
many zero pixels (times zero weights: nothing).

The RGB stem (3 input channels) has no 16-channel block: its data is ``NCHW4c`` with one
chunk (``NHWC`` padded to 4 channels, :data:`STEM_DATA_BLOCK`), a pixel 4 bytes of u8 or 8 of
bf16, so a tile row holds a whole kernel row of up to 16 (u8) or 8 (bf16) columns: ``taps`` =
KW, one step (7×7: K = 28 bytes u8, 56 bf16). Its fp32 kernel ran at 70% of the fp32 peak and
still took 0.83 ms of ResNet-50's int8 7.0 (AMX Xeon, 2026-12-05).

A u8 pixel of 64 channels (``NCHW64c``, ``tuner/graph/tile_blocks.py``) fills a tile row
alone: ``taps`` = 1, a kernel row in KW steps.

Layouts: data ``NCHW{a}c`` (u8 or bf16; ``a`` = 16, u8 also 64, the stem 4); weight (I/a,
KH, steps, O/16, rows, 16, g) = (ic chunk, kernel row, column step, oc chunk, ``tap · a/g +
group``, output lane, channel in group), ``g`` the format's group (4 u8, 2 bf16), so the
weight tiles of consecutive output chunks are contiguous (one tensor-intrinsic region for a
block of several); output ``NCHW16c`` or ``NCHW64c`` in the accumulator type (s32, fp32).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import te, topi
from tvm.topi.utils import get_const_tuple

from .amx import tile_rows
from .dot_conv import BF16, DOT_LANES, INT8, STEM_DATA_BLOCK, DotFormat, format_of_data

#: The TE block (and task) name of each format's compute.
AMX_CONV_BLOCKS = {INT8: "conv2d_NCHWc_int8_amx", BF16: "conv2d_NCHWc_bf16_amx"}
#: Input channels per pixel of a tile row (the data block).
AMX_DATA_BLOCK = 16
#: Bytes of a tile row.
TILE_ROW_BYTES = 64
#: Most kernel columns one reduction computes (steps × taps): wider kernels stay on the
#: formats' zmm kernels.
MAX_COLUMNS = 4


def element_bytes(fmt: DotFormat) -> int:
    """Bytes of one element of the format's data: its group is 4 bytes."""
    return 4 // fmt.group


def taps_of(kernel_width: int, fmt: DotFormat = INT8, block: int = AMX_DATA_BLOCK) -> int:
    """Input pixels of a tile row for a kernel ``kernel_width`` columns wide on data of
    ``block`` channels a pixel (0: none fits)."""
    pixels = TILE_ROW_BYTES // (block * element_bytes(fmt))
    if block == STEM_DATA_BLOCK:  # the whole kernel row in one tile row
        return kernel_width if kernel_width <= pixels else 0
    if kernel_width == 1:
        return 1
    return pixels if kernel_width <= MAX_COLUMNS else 0


def steps_of(kernel_width: int, fmt: DotFormat = INT8, block: int = AMX_DATA_BLOCK) -> int:
    """Tile rows per kernel row: the kernel's columns in groups of :func:`taps_of`."""
    taps = taps_of(kernel_width, fmt, block)
    return -(-kernel_width // taps) if taps else 0


def amx_block_name(fmt: DotFormat) -> str:
    return AMX_CONV_BLOCKS[fmt]


def amx_refusal(
    in_channels: int, out_channels: int, kernel: tuple[int, ...], dilation: Any, groups: int
) -> str:
    """Why a conv cannot run as this op, or "" when it can."""
    if groups != 1:
        return f"grouped (groups={groups})"
    if not taps_of(int(kernel[1])):
        return f"kernel {kernel[1]} columns wide (at most {MAX_COLUMNS})"
    if any(int(d) != 1 for d in dilation):
        return "dilated"
    if in_channels % AMX_DATA_BLOCK or out_channels % DOT_LANES:
        return f"channels {in_channels}→{out_channels} not multiples of 16"
    return ""


def stem_refusal(
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    out_width: int,
    dilation: Any,
    groups: int,
    fmt: DotFormat,
) -> str:
    """Why a conv cannot run as the AMX stem (at most 4 input channels, ``NCHW4c`` data), or
    "" when it can; the precision rewrites ask it for the convs they make integer or bf16."""
    if groups != 1 or x_shape[1] > STEM_DATA_BLOCK:
        return f"{x_shape[1]} input channels, groups {groups}: not an AMX stem"
    if not taps_of(int(w_shape[3]), fmt, STEM_DATA_BLOCK):
        return f"kernel {w_shape[3]} columns wide: wider than a tile row"
    if any(int(d) != 1 for d in dilation):
        return "dilated"
    if w_shape[0] % DOT_LANES:
        return f"{w_shape[0]} output channels not a multiple of 16"
    if tile_rows(out_width) is None:
        return f"output rows {out_width} wide: no tile of 4-16 rows divides them"
    return ""


def pack_weight(
    weight: np.ndarray, fmt: DotFormat = INT8, block: int = AMX_DATA_BLOCK
) -> np.ndarray:
    """OIHW → (I/a, KH, steps, O/16, rows, 16, g) for data of ``a`` = ``block`` channels a
    pixel, the columns past KW and the input channels past I (the stem's 3 of 4) zero."""
    o, i, kh, kw = weight.shape
    taps, steps = taps_of(kw, fmt, block), steps_of(kw, fmt, block)
    b, g = DOT_LANES, fmt.group
    chunks = -(-i // block)
    padded = np.zeros((o, chunks * block, kh, steps * taps), weight.dtype)
    padded[:, :i, :, :kw] = weight
    # (oc chunk, lane, ic chunk, group, channel in group, row, step, tap)
    blocks = padded.reshape(o // b, b, chunks, block // g, g, kh, steps, taps)
    # → (ic chunk, row, step, oc chunk, tap, group, lane, channel in group)
    packed = np.ascontiguousarray(blocks.transpose(2, 5, 6, 0, 7, 3, 1, 4))
    return packed.reshape(chunks, kh, steps, o // b, taps * block // g, b, g)


def conv2d_nchwc_amx(
    data: te.Tensor,
    kernel: te.Tensor,
    strides: Any,
    padding: Any,
    kernel_width: int,
    out_block: int = DOT_LANES,
) -> te.Tensor:
    """The TE compute of the format of ``data``'s type, ``NCHW{out_block}c`` out (a multiple of
    the accumulator tile's 16 channels): the reduction is (ic chunk, kernel row, column step,
    ``tap · 16/g + group``, channel in group); the block's innermost axes (output lane,
    reduction row, channel) the intrinsic's."""
    fmt = format_of_data(str(data.dtype))
    assert fmt is not None, data.dtype
    n, ic_chunks, height, width, block = get_const_tuple(data.shape)
    _, kh_size, steps, oc_chunks, rows, lanes, group = get_const_tuple(kernel.shape)
    groups_per_pixel = block // group
    taps = rows // groups_per_pixel
    stride_h, stride_w = (int(s) for s in strides)
    top, left, bottom, right = (int(p) for p in padding)
    out_h = (height + top + bottom - kh_size) // stride_h + 1
    out_w = (width + left + right - kernel_width) // stride_w + 1
    # The last tile row reads ``steps · taps`` pixels from its first: pad the right to hold them.
    extra = max(0, (out_w - 1) * stride_w + steps * taps - (width + left + right))
    if top or left or bottom or right or extra:
        data = topi.nn.pad(
            data, (0, 0, top, left, 0), (0, 0, bottom, right + extra, 0), name="data_pad"
        )
    ic_outer = te.reduce_axis((0, ic_chunks), name="ic_outer")
    kh = te.reduce_axis((0, kh_size), name="kh")
    step = te.reduce_axis((0, steps), name="kw_step")
    row = te.reduce_axis((0, rows), name="tap_group")
    ic_lane = te.reduce_axis((0, group), name="ic_lane")
    acc = fmt.acc_dtype
    tiles = out_block // lanes  # accumulator tiles of an output block

    def output(b: Any, occ: Any, oh: Any, ow: Any, ocb: Any) -> Any:
        chunk, lane = occ, ocb  # the expressions the 16-channel traces were recorded with
        if tiles > 1:
            chunk, lane = occ * tiles + ocb // lanes, ocb % lanes
        pixel = data[
            b,
            ic_outer,
            oh * stride_h + kh,
            ow * stride_w + step * taps + row // groups_per_pixel,
            row % groups_per_pixel * group + ic_lane,
        ]
        weight = kernel[ic_outer, kh, step, chunk, row, lane, ic_lane]
        return te.sum(
            pixel.astype(acc) * weight.astype(acc), axis=[ic_outer, kh, step, row, ic_lane]
        )

    name = amx_block_name(fmt)
    return te.compute((n, oc_chunks // tiles, out_h, out_w, out_block), output, name=name, tag=name)


__all__ = [
    "AMX_CONV_BLOCKS",
    "AMX_DATA_BLOCK",
    "MAX_COLUMNS",
    "STEM_DATA_BLOCK",
    "TILE_ROW_BYTES",
    "amx_block_name",
    "amx_refusal",
    "conv2d_nchwc_amx",
    "element_bytes",
    "pack_weight",
    "stem_refusal",
    "steps_of",
    "taps_of",
]
