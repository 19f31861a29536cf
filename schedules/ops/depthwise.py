"""The blocked depthwise conv op: its Relax call, weight packing, TE compute and legalization.

The blocked depthwise conv2d is a Relax ``conv2d`` with ``data_layout=NCHW{x}c``,
``kernel_layout=OIHW1i{x}o`` and ``groups`` = channels (:func:`blocked_depthwise_conv2d`); TOPI
0.27 has no ``depthwise_conv2d_NCHWc`` compute any more (it lived in the removed ``topi.x86``), so
:func:`depthwise_conv2d_nchwc` defines it and :func:`legalize_depthwise_conv2d` lowers the call.
Its schedule space is ``schedules/spaces/depthwise_nchwc.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import relax, te, topi
from tvm.ir import IRModule
from tvm.relax import BlockBuilder, Call, Expr
from tvm.s_tir import Schedule

from .conv_call import conv2d_call, lower_conv2d
from .nchwc import block_names

DEPTHWISE_BLOCK = "depthwise_conv2d_NCHWc"
PAD_BLOCK = "depthwise_pad"


def is_blockable_depthwise(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], groups: int, lanes: int
) -> bool:
    """A 2-D NCHW conv with one filter per channel (channel multiplier 1) whose channels divide
    by the vector lanes: the case the blocked depthwise kernel computes."""
    channels = x_shape[1]
    return (
        len(x_shape) == 4
        and len(w_shape) == 4
        and groups == channels
        and w_shape[0] == channels
        and w_shape[1] == 1
        and channels % lanes == 0
    )


def block_depthwise_weight(weight: np.ndarray, lanes: int) -> np.ndarray:
    """(C, 1, KH, KW) → OIHW1i{x}o: (C/x, 1, KH, KW, 1, x), the x channels of a tap contiguous."""
    c, one, kh, kw = weight.shape
    if one != 1 or c % lanes:
        raise ValueError(f"not a depthwise weight of {lanes}-divisible channels: {weight.shape}")
    return np.ascontiguousarray(
        weight.reshape(c // lanes, lanes, 1, kh, kw).transpose(0, 2, 3, 4, 1)[:, :, :, :, None, :]
    )


def blocked_depthwise_conv2d(data: Expr, weight: np.ndarray, attrs: Any, lanes: int) -> Expr:
    """The Relax call computing ``conv2d(x, weight, **attrs)`` (a depthwise NCHW conv with
    constant ``weight``) on ``data`` = x in ``NCHW{x}c``; its result is in ``NCHW{x}c`` too.

    For a blocked-layout pass: check :func:`is_blockable_depthwise` first.
    """
    return conv2d_call(
        data,
        relax.const(block_depthwise_weight(weight, lanes), str(weight.dtype)),
        attrs,
        groups=int(attrs.groups),
        data_layout=f"NCHW{lanes}c",
        kernel_layout=f"OIHW1i{lanes}o",
        out_layout=f"NCHW{lanes}c",
    )


def depthwise_conv2d_nchwc(
    data: te.Tensor,
    kernel: te.Tensor,
    strides: Any,
    padding: Any,
    dilation: Any,
    out_dtype: str,
) -> te.Tensor:
    """Depthwise conv, ``data`` (N, C/x, H, W, x), ``kernel`` (C/x, 1, KH, KW, 1, x), padding
    (top, left, bottom, right); output (N, C/x, OH, OW, x) in block :data:`DEPTHWISE_BLOCK`."""
    n, chunks, height, width, lanes = (int(d) for d in data.shape)
    _, _, kh, kw, _, _ = (int(d) for d in kernel.shape)
    sh, sw = (int(s) for s in strides)
    dh, dw = (int(d) for d in dilation)
    top, left, bottom, right = (int(p) for p in padding)
    out_h = (height + top + bottom - dh * (kh - 1) - 1) // sh + 1
    out_w = (width + left + right - dw * (kw - 1) - 1) // sw + 1
    padded = data
    if top or left or bottom or right:
        padded = topi.nn.pad(data, [0, 0, top, left, 0], [0, 0, bottom, right, 0], name=PAD_BLOCK)
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    return te.compute(
        (n, chunks, out_h, out_w, lanes),
        lambda b, c, y, x, k: te.sum(
            padded[b, c, y * sh + ry * dh, x * sw + rx * dw, k].astype(out_dtype)
            * kernel[c, 0, ry, rx, 0, k].astype(out_dtype),
            axis=[ry, rx],
        ),
        name=DEPTHWISE_BLOCK,
        tag=DEPTHWISE_BLOCK,
    )


def is_blocked_depthwise_call(call: Call) -> bool:
    """Whether a Relax conv2d call is a blocked depthwise one (as built by
    :func:`blocked_depthwise_conv2d`)."""
    attrs = call.attrs
    return str(attrs.data_layout).startswith("NCHW") and str(attrs.kernel_layout).startswith(
        "OIHW1i"
    )


def legalize_depthwise_conv2d(bb: BlockBuilder, call: Call) -> Expr:
    """Lower a blocked depthwise Relax conv2d with :func:`depthwise_conv2d_nchwc`."""
    return lower_conv2d(bb, call, depthwise_conv2d_nchwc, DEPTHWISE_BLOCK)


def is_blocked_depthwise(mod: IRModule) -> bool:
    """Whether the task's function holds the blocked depthwise block."""
    return DEPTHWISE_BLOCK in block_names(Schedule(mod))
