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

Layouts: data ``NCHW16c`` (u8 or bf16); weight (I/16, KH, steps, O/16, rows, 16, g) = (ic chunk,
kernel row, column step, oc chunk, ``tap · 16/g + group``, output lane, channel in group), ``g``
the format's group (4 u8, 2 bf16), so the weight tiles of consecutive output chunks are
contiguous (one tensor-intrinsic region for a block of several); output ``NCHW16c`` in the
accumulator type (s32, fp32).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import te, topi
from tvm.topi.utils import get_const_tuple

from .dot_conv import BF16, DOT_LANES, INT8, DotFormat, format_of_data

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


def taps_of(kernel_width: int, fmt: DotFormat = INT8) -> int:
    """Input pixels of a tile row for a kernel ``kernel_width`` columns wide (0: none fits)."""
    if kernel_width == 1:
        return 1
    if kernel_width > MAX_COLUMNS:
        return 0
    return TILE_ROW_BYTES // (AMX_DATA_BLOCK * element_bytes(fmt))


def steps_of(kernel_width: int, fmt: DotFormat = INT8) -> int:
    """Tile rows per kernel row: the kernel's columns in groups of :func:`taps_of`."""
    taps = taps_of(kernel_width, fmt)
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


def pack_weight(weight: np.ndarray, fmt: DotFormat = INT8) -> np.ndarray:
    """OIHW → (I/16, KH, steps, O/16, rows, 16, g), the columns past KW zero."""
    o, i, kh, kw = weight.shape
    taps, steps = taps_of(kw, fmt), steps_of(kw, fmt)
    b, g = DOT_LANES, fmt.group
    padded = np.zeros((o, i, kh, steps * taps), weight.dtype)
    padded[..., :kw] = weight
    # (oc chunk, lane, ic chunk, group, channel in group, row, step, tap)
    blocks = padded.reshape(o // b, b, i // AMX_DATA_BLOCK, AMX_DATA_BLOCK // g, g, kh, steps, taps)
    # → (ic chunk, row, step, oc chunk, tap, group, lane, channel in group)
    packed = np.ascontiguousarray(blocks.transpose(2, 5, 6, 0, 7, 3, 1, 4))
    return packed.reshape(i // AMX_DATA_BLOCK, kh, steps, o // b, taps * AMX_DATA_BLOCK // g, b, g)


def conv2d_nchwc_amx(
    data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any, kernel_width: int
) -> te.Tensor:
    """The TE compute of the format of ``data``'s type: the reduction is (ic chunk, kernel row,
    column step, ``tap · 16/g + group``, channel in group); the block's innermost axes (output
    lane, reduction row, channel) the intrinsic's."""
    fmt = format_of_data(str(data.dtype))
    assert fmt is not None, data.dtype
    n, ic_chunks, height, width, _ = get_const_tuple(data.shape)
    _, kh_size, steps, oc_chunks, rows, lanes, group = get_const_tuple(kernel.shape)
    groups_per_pixel = AMX_DATA_BLOCK // group
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
    return te.compute(
        (n, oc_chunks, out_h, out_w, lanes),
        lambda b, occ, oh, ow, ocb: te.sum(
            data[
                b,
                ic_outer,
                oh * stride_h + kh,
                ow * stride_w + step * taps + row // groups_per_pixel,
                row % groups_per_pixel * group + ic_lane,
            ].astype(acc)
            * kernel[ic_outer, kh, step, occ, row, ocb, ic_lane].astype(acc),
            axis=[ic_outer, kh, step, row, ic_lane],
        ),
        name=amx_block_name(fmt),
        tag=amx_block_name(fmt),
    )


__all__ = [
    "AMX_CONV_BLOCKS",
    "AMX_DATA_BLOCK",
    "MAX_COLUMNS",
    "TILE_ROW_BYTES",
    "amx_block_name",
    "amx_refusal",
    "conv2d_nchwc_amx",
    "element_bytes",
    "pack_weight",
    "steps_of",
    "taps_of",
]
