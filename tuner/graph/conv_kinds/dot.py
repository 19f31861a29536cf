"""Dot-product convs: u8 × s8 → s32 on AVX-512 VNNI, bf16 × bf16 → fp32 on AVX-512 BF16
(``schedules/ops/dot_conv.py``).

``tuner/graph/quantized.py`` turns a QDQ conv into a Relax conv2d of its u8 input and s8 weight
with an s32 output; ``tuner/graph/bf16.py`` (``--precision bf16``) turns an fp32 conv into one of
bf16 input and weight with an fp32 output. These kinds block them: ``NCHW{a}c`` in (a multiple of
the format's group), the weight packed in 64-byte tiles, ``NCHW16c`` out. The rewrites ask
:func:`dot_refusal` before they make such a conv, so every one they make is one a kind blocks.
"""

from __future__ import annotations

from typing import ClassVar

from tvm import relax
from tvm.ir.expr import GenericConst
from tvm.relax import BlockBuilder, Call, Expr

from convtune.schedules.ops.dot_conv import (
    BF16,
    DOT_LANES,
    INT8,
    DotFormat,
    dot_conv2d,
    dot_format_of_call,
    legalize_dot_conv2d,
    pack_weight,
)

from .base import ConvKind, ConvOperands, ConvSite, Decision


def dot_refusal(x_shape: tuple[int, ...], w_shape: tuple[int, ...], groups: int, lanes: int) -> str:
    """Why a conv of these shapes cannot run as a dot-product conv on a target of ``lanes`` fp32
    lanes, or "" when it can."""
    in_channels, out_channels = x_shape[1], w_shape[0]
    if lanes != DOT_LANES:
        return "the target has no 512-bit vectors"
    if groups != 1:
        return f"grouped (groups={groups}): no dot-product kernel of ours"
    # An input block is 8 or 16 channels (layout.channel_block): whole groups of 4 (int8) or 2.
    if in_channels % 8 or out_channels % DOT_LANES:
        return f"channels {in_channels}→{out_channels} not multiples of 8→16"
    return ""


class DotKind(ConvKind):
    """The blocked conv of one :class:`DotFormat`."""

    fmt: ClassVar[DotFormat]
    #: The layout plan's reason for a conv this kind blocks.
    reason: ClassVar[str]

    def decide(self, site: ConvSite) -> Decision | None:
        if str(site.call.args[0].ty.dtype) != self.fmt.data_dtype:
            return None
        refusal = dot_refusal(site.x_shape, site.w_shape, site.groups, site.lanes)
        return Decision(not refusal, refusal or self.reason)

    def build(self, bb: BlockBuilder, site: ConvSite, operands: ConvOperands) -> Expr:
        a = operands.data_block
        assert a is not None and isinstance(operands.weight, GenericConst)
        weight = pack_weight(operands.weight.value.numpy(), a, self.fmt)
        return dot_conv2d(operands.data, relax.const(weight, self.fmt.weight_dtype), site.attrs, a)

    def legalizes(self, call: Call) -> bool:
        return dot_format_of_call(call) is self.fmt

    def legalize(self, bb: BlockBuilder, call: Call) -> Expr:
        return legalize_dot_conv2d(bb, call, self.fmt)


class Int8Kind(DotKind):
    name: ClassVar[str] = "int8"
    fmt: ClassVar[DotFormat] = INT8
    reason: ClassVar[str] = "u8×s8→s32 (VNNI)"


class Bf16Kind(DotKind):
    name: ClassVar[str] = "bf16"
    fmt: ClassVar[DotFormat] = BF16
    reason: ClassVar[str] = "bf16×bf16→fp32 (AVX-512 BF16)"
