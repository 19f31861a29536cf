"""Integer convs: u8 activations × s8 weights → s32 on AVX-512 VNNI (``schedules/ops/int8.py``).

``tuner/graph/quantized.py`` turns a QDQ conv (DequantizeLinear → Conv) into a Relax conv2d of
its u8 input and s8 weight with an s32 output; this kind blocks it: ``NCHW{a}c`` u8 in (a
multiple of 4: groups of four channels per ``vpdpbusd`` lane), the weight packed in 64-byte tiles,
``NCHW16c`` s32 out. The rewrite asks :func:`int8_refusal` before it makes an integer conv, so
every integer conv it makes is one this kind blocks.
"""

from __future__ import annotations

from typing import ClassVar

from tvm import relax
from tvm.ir.expr import GenericConst
from tvm.relax import BlockBuilder, Call, Expr

from convtune.schedules.ops.int8 import (
    VNNI_GROUP,
    VNNI_LANES,
    int8_conv2d,
    is_int8_conv2d_call,
    legalize_int8_conv2d,
    pack_weight,
)

from .base import ConvKind, ConvOperands, ConvSite, Decision


def int8_refusal(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], groups: int, lanes: int
) -> str:
    """Why a conv of these shapes cannot run as a VNNI integer conv on a target of ``lanes`` fp32
    lanes, or "" when it can."""
    in_channels, out_channels = x_shape[1], w_shape[0]
    if lanes != VNNI_LANES:
        return "the target has no 512-bit vectors"
    if groups != 1:
        return f"grouped (groups={groups}): no VNNI kernel of ours"
    # An input block is 8 or 16 channels (layout.channel_block), whole groups of four.
    if in_channels % (2 * VNNI_GROUP) or out_channels % VNNI_LANES:
        return f"channels {in_channels}→{out_channels} not multiples of 8→16"
    return ""


class Int8Kind(ConvKind):
    name: ClassVar[str] = "int8"

    def decide(self, site: ConvSite) -> Decision | None:
        if str(site.call.args[0].ty.dtype) != "uint8":
            return None
        refusal = int8_refusal(site.x_shape, site.w_shape, site.groups, site.lanes)
        return Decision(not refusal, refusal or "u8×s8→s32 (VNNI)")

    def build(self, bb: BlockBuilder, site: ConvSite, operands: ConvOperands) -> Expr:
        a = operands.data_block
        assert a is not None and isinstance(operands.weight, GenericConst)
        packed = relax.const(pack_weight(operands.weight.value.numpy(), a), "int8")
        return int8_conv2d(operands.data, packed, site.attrs, a)

    def legalizes(self, call: Call) -> bool:
        return is_int8_conv2d_call(call)

    def legalize(self, bb: BlockBuilder, call: Call) -> Expr:
        return legalize_int8_conv2d(bb, call)
