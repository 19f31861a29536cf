"""Depthwise convolutions in the blocked layout: channels in vector lanes, output columns in
registers.

A depthwise conv (groups = channels, one filter per channel) has no reduction over channels, so
the dense kernel of ``nchwc_conv.py`` (broadcast one input, FMA it into a weight vector of 16 output
channels) does not apply; in NCHW, which is where it stayed before, its vector axis is the output
width and every 3×3 tap is an unaligned load. In ``NCHW{x}c`` the x channels of one pixel are one
vector register, and so are the x filter taps of one (kh, kw):

    for kh, kw:                                           # 9 or 25 taps, unrolled
        w = weights[c_chunk, 0, kh, kw, 0, 0:x]           # one vector register
        for j in 0 .. reg_n:                              # unrolled: reg_n accumulators
            acc[j] += input[c_chunk, ih(kh), iw(j, kw), 0:x] * w

one vector FMA per input vector loaded, ``reg_n`` zmm accumulators per output row segment, the
bias / BatchNorm / ReLU6 / HardSwish epilogue applied to them before they are written back, and
(with kw and j unrolled, stride 1) the loads of neighbouring taps shared by LLVM. Output rows of
all channel chunks run in parallel.

Knobs the search explores: the register block ``reg_n`` on the output width (a tile decision the
cost model ranks and the mutator varies) and, as two sketches, where the zero padding happens —
a separate pass over the input before the conv (plain loads in the kernel), or inlined into the
kernel (no extra pass over memory, a select per tap). Which wins depends on the layer (small
7×7 maps with many channels vs large 112×112 ones), so it is measured per layer.

The blocked depthwise conv2d is a Relax ``conv2d`` with ``data_layout=NCHW{x}c``,
``kernel_layout=OIHW1i{x}o`` and ``groups`` = channels (:func:`blocked_depthwise_conv2d`); TOPI
0.27 has no ``depthwise_conv2d_NCHWc`` compute any more (it lived in the removed ``topi.x86``), so
:func:`depthwise_conv2d_nchwc` defines it and :func:`legalize_depthwise_conv2d` lowers the call.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from tvm import relax, te, topi
from tvm.ir import IRModule
from tvm.relax import BlockBuilder, Call, Expr
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.space_generator import SpaceGenerator
from tvm.target import Target

from .base import ScheduleSpace
from .conv_call import conv2d_call, lower_conv2d
from .nchwc_conv import (
    MAX_REGISTER_BLOCK,
    block_names,
    conv_and_epilogue,
    epilogue_at,
    epilogue_fuses,
    padding_sketches,
    register_block_space,
    schedule_prologue,
)

DEPTHWISE_BLOCK = "depthwise_conv2d_NCHWc"
PAD_BLOCK = "depthwise_pad"
SPACE_NAME = "depthwise-nchwc"


# ---------------------------------------------------------------------------------------------
# the blocked depthwise op: Relax call, weight packing, TE compute, legalization
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# the schedule space
# ---------------------------------------------------------------------------------------------


def is_blocked_depthwise(mod: IRModule) -> bool:
    """Whether the task's function holds the blocked depthwise block."""
    return DEPTHWISE_BLOCK in block_names(Schedule(mod))


def schedule_depthwise(
    sch: Schedule, *, inline_pad: bool, max_block: int = MAX_REGISTER_BLOCK
) -> None:
    """Apply the register-blocked depthwise schedule, sampling ``reg_n`` ≤ ``max_block``
    (in place)."""
    conv, output, prologue = conv_and_epilogue(sch, SPACE_NAME, DEPTHWISE_BLOCK)
    batch, chunk, oh, ow, lanes, kh, kw = sch.get_loops(conv)
    reg_n = sch.sample_perfect_tile(ow, n=2, max_innermost_factor=max_block)
    ow_outer, ow_inner = sch.split(ow, reg_n)
    sch.reorder(batch, chunk, oh, ow_outer, kh, kw, ow_inner, lanes)
    rows = sch.fuse(batch, chunk, oh)
    sch.parallel(rows)
    # kw and the register block unrolled: LLVM keeps the accumulators in zmm registers and, at
    # stride 1, loads an input vector once for the taps that share it.
    sch.unroll(kw)
    sch.unroll(ow_inner)
    sch.vectorize(lanes)
    epilogue_at(sch, output, ow_outer)
    sch.decompose_reduction(conv, kh)
    schedule_prologue(sch, prologue, inline_pad=inline_pad, pad_block=PAD_BLOCK)


def depthwise_sketches(sch: Schedule, max_block: int = MAX_REGISTER_BLOCK) -> list[Schedule]:
    """The two sketches of the space: padding as its own pass, and padding inlined."""
    return padding_sketches(sch, schedule_depthwise, PAD_BLOCK, max_block)


class DepthwiseConvSpace(ScheduleSpace):
    """Blocked depthwise convolutions: the register-blocked kernel above, 2-16 candidates per
    layer, searched alone first (``seed_trials``) and then in the union with the generic space."""

    name: ClassVar[str] = SPACE_NAME
    seed_trials: ClassVar[int] = 8

    def applies_to(self, mod: IRModule) -> bool:
        return is_blocked_depthwise(mod) and epilogue_fuses(mod, DEPTHWISE_BLOCK)

    def generator(self, target: Target) -> SpaceGenerator:
        return register_block_space(depthwise_sketches, target)
