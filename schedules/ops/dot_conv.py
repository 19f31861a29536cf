"""Blocked convs whose innermost reduction is a short dot product per lane: VNNI and BF16.

``vpdpbusd`` (AVX-512 VNNI) adds the products of four u8 × s8 pairs into each of sixteen s32
lanes; ``vdpbf16ps`` (AVX-512 BF16) adds two bf16 × bf16 products into each of sixteen fp32
lanes. Both want the same layout, differing only in the group of input channels one lane
reduces (:class:`DotFormat`):

- data ``NCHW{a}c`` (``a`` a multiple of the group: a block holds ``a/g`` groups);
- weights (O/16, I/a, KH, KW, a/g, 16, g): one 64-byte tile per group;
- output ``NCHW16c`` in the accumulator type, the sixteen lanes of one instruction.

The TE compute splits its reduction (ic_outer, kh, kw, ic_group, ic_lane) so that the block's
two innermost axes (oc_block, ic_lane) are exactly the tensor intrinsic's
(``schedules/ops/vnni.py``, ``schedules/ops/bf16_dot.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from tvm import relax, te, topi
from tvm.relax import BlockBuilder, Call, Expr
from tvm.topi.utils import get_const_tuple

from .conv_call import conv2d_call

#: Accumulator lanes of one instruction (zmm).
DOT_LANES = 16
#: The data block of an RGB stem: up to 4 input channels (padded), one pixel a 4-byte group
#: of u8 (one ``vpdpbusd`` group) or two ``vdpbf16ps`` pairs of bf16.
STEM_DATA_BLOCK = 4


@dataclass(frozen=True)
class DotFormat:
    """One dot-product conv: its element types and the channels a lane reduces per
    instruction."""

    #: What the layout plan, the workloads table and the manifest call its precision.
    precision: str
    #: The TE block (and task) name of its compute.
    block: str
    data_dtype: str
    weight_dtype: str
    acc_dtype: str
    #: Input channels one accumulator lane reduces per instruction.
    group: int


INT8 = DotFormat("int8", "conv2d_NCHWc_int8", "uint8", "int8", "int32", 4)
BF16 = DotFormat("bf16", "conv2d_NCHWc_bf16", "bfloat16", "bfloat16", "float32", 2)
FORMATS = (INT8, BF16)


def format_of_data(dtype: str) -> DotFormat | None:
    """The dot format whose conv reads data of ``dtype``, if any."""
    return next((f for f in FORMATS if f.data_dtype == dtype), None)


def pack_weight(weight: np.ndarray, in_block: int, fmt: DotFormat) -> np.ndarray:
    """OIHW → (O/16, I/a, KH, KW, a, 16): the elements of (O/16, I/a, KH, KW, a/g, 16, g), the
    input channels past I zero (a stem's 3 of 4).

    Relax's conv2d takes no layout with two sub-axes of one axis (``OIHW4i16o4i``: "more than one
    subordinate"), so the call carries the tile as the 6-D ``OIHW{a}i16o`` its shape inference
    accepts, and :func:`legalize_dot_conv2d` reshapes it back to 7-D for the compute."""
    o, channels, h, w = weight.shape
    b, g = DOT_LANES, fmt.group
    i = -(-channels // in_block) * in_block
    if i != channels:
        weight = np.concatenate([weight, np.zeros((o, i - channels, h, w), weight.dtype)], axis=1)
    blocks = weight.reshape(o // b, b, i // in_block, in_block // g, g, h, w)
    packed = np.ascontiguousarray(blocks.transpose(0, 2, 5, 6, 3, 1, 4))
    return packed.reshape(o // b, i // in_block, h, w, in_block, b)


def dot_conv2d(data: Expr, packed: Expr, attrs: Any, in_block: int) -> Expr:
    """The Relax conv2d of ``data`` (``NCHW{a}c``) with the packed weight, ``NCHW16c`` out in
    the accumulator type (the ``out_dtype`` of ``attrs``: the rewrite that made the conv sets it
    to the format's)."""
    return conv2d_call(
        data,
        packed,
        attrs,
        groups=1,
        data_layout=f"NCHW{in_block}c",
        kernel_layout=f"OIHW{in_block}i{DOT_LANES}o",
        out_layout=f"NCHW{DOT_LANES}c",
    )


def dot_format_of_call(call: Call) -> DotFormat | None:
    """The format of a packed dot-product Relax conv2d (:func:`dot_conv2d`), or None."""
    if len(str(call.attrs.data_layout)) == 4:
        return None
    return format_of_data(str(call.args[0].ty.dtype))


def conv2d_nchwc_dot(
    data: te.Tensor,
    kernel: te.Tensor,
    strides: Any,
    padding: Any,
    dilation: Any,
    fmt: DotFormat,
) -> te.Tensor:
    """The TE compute: its reduction is split (ic_outer, kh, kw, ic_group, ic_lane) so the two
    innermost axes of the block (oc_block, ic_lane) are exactly the intrinsic's."""
    n, ic_chunks, height, width, _ = get_const_tuple(data.shape)
    oc_chunks, _, kh_size, kw_size, groups, lanes, group = get_const_tuple(kernel.shape)
    stride_h, stride_w = (int(s) for s in strides)
    dil_h, dil_w = (int(d) for d in dilation)
    top, left, bottom, right = (int(p) for p in padding)
    if top or left or bottom or right:
        data = topi.nn.pad(data, (0, 0, top, left, 0), (0, 0, bottom, right, 0), name="data_pad")
    out_h = (height + top + bottom - (kh_size - 1) * dil_h - 1) // stride_h + 1
    out_w = (width + left + right - (kw_size - 1) * dil_w - 1) // stride_w + 1
    ic_outer = te.reduce_axis((0, ic_chunks), name="ic_outer")
    kh = te.reduce_axis((0, kh_size), name="kh")
    kw = te.reduce_axis((0, kw_size), name="kw")
    ic_group = te.reduce_axis((0, groups), name="ic_group")
    ic_lane = te.reduce_axis((0, group), name="ic_lane")
    acc = fmt.acc_dtype
    return te.compute(
        (n, oc_chunks, out_h, out_w, lanes),
        lambda b, occ, oh, ow, ocb: te.sum(
            data[
                b,
                ic_outer,
                oh * stride_h + kh * dil_h,
                ow * stride_w + kw * dil_w,
                ic_group * group + ic_lane,
            ].astype(acc)
            * kernel[occ, ic_outer, kh, kw, ic_group, ocb, ic_lane].astype(acc),
            axis=[ic_outer, kh, kw, ic_group, ic_lane],
        ),
        name=fmt.block,
        tag=fmt.block,
    )


def legalize_dot_conv2d(bb: BlockBuilder, call: Call, fmt: DotFormat) -> Expr:
    """Lower a packed dot-product Relax conv2d with :func:`conv2d_nchwc_dot`, its weight
    reshaped to the 7-D tile (a constant reshape, folded before the build)."""
    o, i, h, w, a, b = (int(d) for d in call.args[1].ty.shape)
    tiles = (o, i, h, w, a // fmt.group, b, fmt.group)
    weight = bb.emit(relax.op.reshape(call.args[1], tiles))
    attrs = call.attrs
    return bb.call_te(
        partial(conv2d_nchwc_dot, fmt=fmt),  # emit_te passes TVM objects only
        call.args[0],
        weight,
        attrs.strides,
        attrs.padding,
        attrs.dilation,
        primfunc_name_hint=fmt.block,
    )


__all__ = [
    "BF16",
    "DOT_LANES",
    "FORMATS",
    "INT8",
    "STEM_DATA_BLOCK",
    "DotFormat",
    "conv2d_nchwc_dot",
    "dot_conv2d",
    "dot_format_of_call",
    "format_of_data",
    "legalize_dot_conv2d",
    "pack_weight",
]
