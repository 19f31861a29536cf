"""The integer conv of AMX targets: its weight laid out for tile register blocks, and a kernel
row's columns packed into one 64-byte tile row where the kernel is 2 to 4 columns wide.

An AMX ``tdpbusd`` costs the same 16 cycles whether a tile row holds 16 or 64 bytes
(``amx.py``). In ``NCHW16c`` one pixel's 16 input channels are 16 bytes, and the 16 channels
of four consecutive input pixels are 64 contiguous bytes: the taps ``kw = 0..3`` of one kernel
row at that output pixel. So a conv 2 to 4 columns wide packs its columns into the reduction
(``kw · 4 + group`` are the 16 rows of a weight tile, columns past the kernel's zero): one
``tdpbusd`` does a kernel row (``taps`` = 4). A 1-column kernel keeps 16-byte tile rows
(``taps`` = 1). The compute reads up to ``4 - KW`` pixels past the last column the conv needs;
the data is padded on the right by as many zero pixels (times zero weights: nothing).

Layouts: data u8 ``NCHW16c``; weight s8 (I/16, KH, O/16, 4·taps, 16, 4) = (ic chunk, kernel row,
oc chunk, ``kw · 4 + group``, output lane, channel in group), so the weight tiles of consecutive
output chunks are contiguous (one tensor-intrinsic region for a block of several); output s32
``NCHW16c``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import te, topi
from tvm.topi.utils import get_const_tuple

from .dot_conv import DOT_LANES, INT8

#: The TE block (and task) name of the compute.
AMX_CONV_BLOCK = "conv2d_NCHWc_int8_amx"
#: Input channels per pixel of a tile row (the data block).
AMX_DATA_BLOCK = 16
#: Most input pixels of one tile row (64 bytes).
MAX_TAPS = 4


def taps_of(kernel_width: int) -> int:
    """Input pixels of a tile row for a kernel ``kernel_width`` columns wide (0: none fits)."""
    if kernel_width == 1:
        return 1
    return MAX_TAPS if kernel_width <= MAX_TAPS else 0


def amx_refusal(
    in_channels: int, out_channels: int, kernel: tuple[int, ...], dilation: Any, groups: int
) -> str:
    """Why a conv cannot run as this op, or "" when it can."""
    if groups != 1:
        return f"grouped (groups={groups})"
    if not taps_of(int(kernel[1])):
        return f"kernel {kernel[1]} columns wide (at most {MAX_TAPS})"
    if any(int(d) != 1 for d in dilation):
        return "dilated"
    if in_channels % AMX_DATA_BLOCK or out_channels % DOT_LANES:
        return f"channels {in_channels}→{out_channels} not multiples of 16"
    return ""


def pack_weight(weight: np.ndarray) -> np.ndarray:
    """OIHW s8 → (I/16, KH, O/16, 4·taps, 16, 4), the columns past KW zero."""
    o, i, kh, kw = weight.shape
    taps = taps_of(kw)
    b, g = DOT_LANES, INT8.group
    padded = np.zeros((o, i, kh, taps), weight.dtype)
    padded[..., :kw] = weight
    # (oc chunk, lane, ic chunk, group, channel in group, row, column)
    blocks = padded.reshape(o // b, b, i // AMX_DATA_BLOCK, AMX_DATA_BLOCK // g, g, kh, taps)
    # → (ic chunk, row, oc chunk, column, group, lane, channel in group)
    packed = np.ascontiguousarray(blocks.transpose(2, 5, 0, 6, 3, 1, 4))
    return packed.reshape(i // AMX_DATA_BLOCK, kh, o // b, taps * AMX_DATA_BLOCK // g, b, g)


def conv2d_nchwc_int8_amx(
    data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any, kernel_width: int
) -> te.Tensor:
    """The TE compute: the reduction is (ic chunk, kernel row, ``kw · 4 + group``, channel in
    group); the block's innermost axes (output lane, reduction row, channel) the intrinsic's."""
    n, ic_chunks, height, width, _ = get_const_tuple(data.shape)
    _, kh_size, oc_chunks, rows, lanes, group = get_const_tuple(kernel.shape)
    taps = rows * group // AMX_DATA_BLOCK
    stride_h, stride_w = (int(s) for s in strides)
    top, left, bottom, right = (int(p) for p in padding)
    out_h = (height + top + bottom - kh_size) // stride_h + 1
    out_w = (width + left + right - kernel_width) // stride_w + 1
    # The last tile row reads ``taps`` pixels from its first: pad the right to hold them.
    extra = max(0, (out_w - 1) * stride_w + taps - (width + left + right))
    if top or left or bottom or right or extra:
        data = topi.nn.pad(
            data, (0, 0, top, left, 0), (0, 0, bottom, right + extra, 0), name="data_pad"
        )
    ic_outer = te.reduce_axis((0, ic_chunks), name="ic_outer")
    kh = te.reduce_axis((0, kh_size), name="kh")
    row = te.reduce_axis((0, rows), name="tap_group")
    ic_lane = te.reduce_axis((0, group), name="ic_lane")
    groups_per_pixel = AMX_DATA_BLOCK // group
    return te.compute(
        (n, oc_chunks, out_h, out_w, lanes),
        lambda b, occ, oh, ow, ocb: te.sum(
            data[
                b,
                ic_outer,
                oh * stride_h + kh,
                ow * stride_w + row // groups_per_pixel,
                row % groups_per_pixel * group + ic_lane,
            ].astype("int32")
            * kernel[ic_outer, kh, occ, row, ocb, ic_lane].astype("int32"),
            axis=[ic_outer, kh, row, ic_lane],
        ),
        name=AMX_CONV_BLOCK,
        tag=AMX_CONV_BLOCK,
    )


__all__ = [
    "AMX_CONV_BLOCK",
    "AMX_DATA_BLOCK",
    "MAX_TAPS",
    "amx_refusal",
    "conv2d_nchwc_int8_amx",
    "pack_weight",
    "taps_of",
]
