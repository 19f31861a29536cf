"""The blocked integer conv: u8 activations × s8 weights → s32, laid out for VNNI.

``vpdpbusd`` (AVX-512 VNNI) multiplies four u8 by four s8 and adds the four products into one s32
lane, sixteen lanes at a time: per instruction four times the multiply-adds of an fp32 FMA. The
layout and the compute are ``dot_conv.py``'s with a group of four channels (:data:`INT8`).

The zero padding of the op is the u8 value 0; a quantized input whose zero point is not 0 is
padded by an explicit ``nn.pad`` with its zero point before the conv (``tuner/graph/quantized.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import te
from tvm.relax import BlockBuilder, Call, Expr

from . import dot_conv
from .dot_conv import DOT_LANES, INT8

INT8_CONV_BLOCK = INT8.block
#: s32 lanes of one vpdpbusd (zmm), and the input channels it reduces per lane.
VNNI_LANES = DOT_LANES
VNNI_GROUP = INT8.group


def pack_weight(weight: np.ndarray, in_block: int) -> np.ndarray:
    """OIHW s8 → (O/16, I/a, KH, KW, a, 16): the bytes of (O/16, I/a, KH, KW, a/4, 16, 4)."""
    return dot_conv.pack_weight(weight, in_block, INT8)


def int8_conv2d(data: Expr, packed: Expr, attrs: Any, in_block: int) -> Expr:
    """The Relax conv2d of u8 ``data`` (``NCHW{a}c``) with the packed s8 weight, s32
    ``NCHW16c`` out."""
    return dot_conv.dot_conv2d(data, packed, attrs, in_block)


def conv2d_nchwc_int8(
    data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any, dilation: Any
) -> te.Tensor:
    """The TE compute of an integer conv (``dot_conv.conv2d_nchwc_dot`` with :data:`INT8`)."""
    return dot_conv.conv2d_nchwc_dot(data, kernel, strides, padding, dilation, INT8)


def legalize_int8_conv2d(bb: BlockBuilder, call: Call) -> Expr:
    return dot_conv.legalize_dot_conv2d(bb, call, INT8)


def zero_point_correction(weight: np.ndarray, zero_point: int) -> np.ndarray:
    """``-zp · Σ w`` per output channel, s32 (1, O, 1, 1): the conv of ``x - zp`` is the conv
    of ``x`` plus this, when every tap (padding included) reads ``zp`` where it reads nothing."""
    sums = weight.reshape(weight.shape[0], -1).astype(np.int64).sum(axis=1)
    return (-int(zero_point) * sums).astype(np.int32).reshape(1, -1, 1, 1)


__all__ = [
    "INT8_CONV_BLOCK",
    "VNNI_GROUP",
    "VNNI_LANES",
    "conv2d_nchwc_int8",
    "int8_conv2d",
    "legalize_int8_conv2d",
    "pack_weight",
    "zero_point_correction",
]
