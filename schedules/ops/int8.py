"""The blocked integer conv op: u8 activations × s8 weights → s32, laid out for VNNI.

``vpdpbusd`` (AVX-512 VNNI) multiplies four u8 by four s8 and adds the four products into one s32
lane, sixteen lanes at a time: per instruction four times the multiply-adds of an fp32 FMA. TVM's
``dot_16x4_vnni`` intrinsic is that instruction on one broadcast group of four input channels and
a 16×4 weight tile, so the layout is chosen to make both contiguous:

- data ``NCHW{a}c`` u8 (``a`` a multiple of 4: a block holds ``a/4`` groups of four channels);
- weights s8 (O/16, I/a, KH, KW, a/4, 16, 4), one 64-byte tile per group (``OIHW{a/4}i16o4i``);
- output ``NCHW16c`` s32, the sixteen lanes of one ``vpdpbusd``.

The zero padding of the op is the u8 value 0; a quantized input whose zero point is not 0 is
padded by an explicit ``nn.pad`` with its zero point before the conv (``tuner/graph/quantized.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import relax, te, topi
from tvm.relax import BlockBuilder, Call, Expr
from tvm.topi.utils import get_const_tuple

from .conv_call import conv2d_call

INT8_CONV_BLOCK = "conv2d_NCHWc_int8"
#: s32 lanes of one vpdpbusd (zmm), and the input channels it reduces per lane.
VNNI_LANES = 16
VNNI_GROUP = 4


def pack_weight(weight: np.ndarray, in_block: int) -> np.ndarray:
    """OIHW s8 → (O/16, I/a, KH, KW, a, 16): the bytes of (O/16, I/a, KH, KW, a/4, 16, 4).

    Relax's conv2d takes no layout with two sub-axes of one axis (``OIHW4i16o4i``: "more than one
    subordinate"), so the call carries the tile as the 6-D ``OIHW{a}i16o`` its shape inference
    accepts, and :func:`legalize_int8_conv2d` reshapes it back to 7-D for the compute."""
    o, i, h, w = weight.shape
    b, g = VNNI_LANES, VNNI_GROUP
    blocks = weight.reshape(o // b, b, i // in_block, in_block // g, g, h, w)
    packed = np.ascontiguousarray(blocks.transpose(0, 2, 5, 6, 3, 1, 4))
    return packed.reshape(o // b, i // in_block, h, w, in_block, b)


def int8_conv2d(data: Expr, packed: Expr, attrs: Any, in_block: int) -> Expr:
    """The Relax conv2d of u8 ``data`` (``NCHW{a}c``) with the packed s8 weight, s32
    ``NCHW16c`` out."""
    return conv2d_call(
        data,
        packed,
        attrs,
        groups=1,
        data_layout=f"NCHW{in_block}c",
        kernel_layout=f"OIHW{in_block}i{VNNI_LANES}o",
        out_layout=f"NCHW{VNNI_LANES}c",
    )


def is_int8_conv2d_call(call: Call) -> bool:
    """Whether a Relax conv2d call is a packed integer one (:func:`int8_conv2d`)."""
    return len(str(call.attrs.data_layout)) != 4 and str(call.args[0].ty.dtype) == "uint8"


def conv2d_nchwc_int8(
    data: te.Tensor,
    kernel: te.Tensor,
    strides: Any,
    padding: Any,
    dilation: Any,
    out_dtype: str = "int32",
) -> te.Tensor:
    """The TE compute: its reduction is split (ic_outer, kh, kw, ic_group, ic_lane) so the two
    innermost axes of the block (oc_block, ic_lane) are exactly ``dot_16x4_vnni``'s."""
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
    return te.compute(
        (n, oc_chunks, out_h, out_w, lanes),
        lambda b, occ, oh, ow, ocb: te.sum(
            data[
                b,
                ic_outer,
                oh * stride_h + kh * dil_h,
                ow * stride_w + kw * dil_w,
                ic_group * group + ic_lane,
            ].astype(out_dtype)
            * kernel[occ, ic_outer, kh, kw, ic_group, ocb, ic_lane].astype(out_dtype),
            axis=[ic_outer, kh, kw, ic_group, ic_lane],
        ),
        name=INT8_CONV_BLOCK,
        tag=INT8_CONV_BLOCK,
    )


def legalize_int8_conv2d(bb: BlockBuilder, call: Call) -> Expr:
    """Lower a packed integer Relax conv2d with :func:`conv2d_nchwc_int8`, its weight reshaped
    to the 7-D tile (a constant reshape, folded before the build)."""
    o, i, h, w, a, b = (int(d) for d in call.args[1].ty.shape)
    tiles = (o, i, h, w, a // VNNI_GROUP, b, VNNI_GROUP)
    weight = bb.emit(relax.op.reshape(call.args[1], tiles))
    attrs = call.attrs
    return bb.call_te(
        conv2d_nchwc_int8,
        call.args[0],
        weight,
        attrs.strides,
        attrs.padding,
        attrs.dilation,
        "int32",
        primfunc_name_hint=INT8_CONV_BLOCK,
    )


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
    "is_int8_conv2d_call",
    "legalize_int8_conv2d",
    "pack_weight",
    "zero_point_correction",
]
