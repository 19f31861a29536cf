"""Dot-product convs: u8 × s8 → s32 on AVX-512 VNNI, bf16 × bf16 → fp32 on AVX-512 BF16
(``schedules/ops/dot_conv.py``).

``tuner/graph/quantized.py`` turns a QDQ conv into a Relax conv2d of its u8 input and s8 weight with
an s32 output; ``tuner/graph/bf16.py`` (``--precision bf16``) turns an fp32 conv into one of bf16
input and weight with an fp32 output. These kinds block them: ``NCHW{a}c`` in (a multiple of the
format's group), the weight packed in 64-byte tiles, ``NCHW16c`` out. An RGB stem (at most 4 input
channels) runs as the same op on ``NCHW4c`` data of one chunk (:class:`DotStemKind`). The rewrites
ask :func:`rewrite_refusal` before they make such a conv, so every one they make is one a kind
blocks.

The stem's measured reason (Zen 4, 2 threads, 2026-12-06): ResNet-50 QDQ's 3→64 7×7 stride-2
stem took 1.09 ms in fp32 (onnxruntime's integer node 0.83); as ``int8-stem``, 49 ``vpdpbusd``
per output pixel and 16 channels where fp32 takes 147 FMAs, 0.39 ms (the whole model 0.957×,
paired).
"""

from __future__ import annotations

from typing import Any, ClassVar

from tvm import relax
from tvm.ir.expr import GenericConst
from tvm.relax import BlockBuilder, Call, Expr

from convtune.schedules.ops.dot_conv import (
    BF16,
    DOT_LANES,
    INT8,
    STEM_DATA_BLOCK,
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


def dot_stem_refusal(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], groups: int, lanes: int
) -> str:
    """Why a conv cannot run as a dot-product stem (``NCHW4c`` data, see :class:`DotStemKind`),
    or "" when it can."""
    if lanes != DOT_LANES:
        return "the target has no 512-bit vectors"
    if groups != 1 or x_shape[1] > STEM_DATA_BLOCK:
        return f"{x_shape[1]} input channels, groups {groups}: not a stem"
    if w_shape[0] % DOT_LANES:
        return f"{w_shape[0]} output channels not a multiple of 16"
    return ""


def rewrite_refusal(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], call_attrs: Any, lanes: int
) -> str:
    """Why a precision rewrite (``quantized.py``, ``bf16.py``) leaves a conv of these shapes in
    fp32, or "" when a kind blocks the conv it would make: a dot-product conv or stem (the AMX
    kinds, asked first, take the ones their tiles fit)."""
    groups = int(call_attrs.groups)
    refusal = dot_refusal(x_shape, w_shape, groups, lanes)
    if refusal and not dot_stem_refusal(x_shape, w_shape, groups, lanes):
        return ""
    return refusal


def stem_pixels(bb: BlockBuilder, data: Expr, x_shape: tuple[int, ...]) -> Expr:
    """An NCHW stem input of at most 4 channels as ``NCHW4c`` of one chunk: each pixel's
    channels, padded with zeros to 4, side by side (the weights of the padding are zero)."""
    n, channels, height, width = x_shape
    if channels < STEM_DATA_BLOCK:
        data = bb.emit(relax.op.nn.pad(data, [0, 0, 0, STEM_DATA_BLOCK - channels, 0, 0, 0, 0]))
    pixels = bb.emit(relax.op.permute_dims(data, [0, 2, 3, 1]))
    return bb.emit(relax.op.reshape(pixels, (n, 1, height, width, STEM_DATA_BLOCK)))


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


class DotStemKind(DotKind):
    """The RGB stem of one format as the dot-product conv: NCHW in (at most 4 channels),
    ``NCHW4c`` of one chunk for the op, ``NCHW16c`` out. Where the target's tiles multiply the
    format, the AMX stem kinds (asked first) take the stems a tile fits."""

    reads_blocked: ClassVar[bool] = False

    def decide(self, site: ConvSite) -> Decision | None:
        if str(site.call.args[0].ty.dtype) != self.fmt.data_dtype:
            return None
        if dot_stem_refusal(site.x_shape, site.w_shape, site.groups, site.lanes):
            return None
        if not site.constant_weight or site.out_block != DOT_LANES:
            return None
        return Decision(True, self.reason)

    def computed_in_channels(self, site: ConvSite) -> int:
        return STEM_DATA_BLOCK

    def build(self, bb: BlockBuilder, site: ConvSite, operands: ConvOperands) -> Expr:
        weight = pack_weight(site.weight_array(), STEM_DATA_BLOCK, self.fmt)
        return dot_conv2d(
            stem_pixels(bb, operands.data, site.x_shape),
            relax.const(weight, self.fmt.weight_dtype),
            site.attrs,
            STEM_DATA_BLOCK,
        )


class Int8Kind(DotKind):
    name: ClassVar[str] = "int8"
    fmt: ClassVar[DotFormat] = INT8
    reason: ClassVar[str] = "u8×s8→s32 (VNNI)"


class Bf16Kind(DotKind):
    name: ClassVar[str] = "bf16"
    fmt: ClassVar[DotFormat] = BF16
    reason: ClassVar[str] = "bf16×bf16→fp32 (AVX-512 BF16)"


class Int8StemKind(DotStemKind):
    name: ClassVar[str] = "int8-stem"
    fmt: ClassVar[DotFormat] = INT8
    reason: ClassVar[str] = "u8×s8→s32 stem (VNNI, NCHW4c in)"


class Bf16StemKind(DotStemKind):
    name: ClassVar[str] = "bf16-stem"
    fmt: ClassVar[DotFormat] = BF16
    reason: ClassVar[str] = "bf16×bf16→fp32 stem (AVX-512 BF16, NCHW4c in)"
