"""Convs on AMX targets (``schedules/ops/amx_conv.py``): the weight laid out for tile register
blocks, a kernel row's columns in one or two tile rows.

Asked before the dot-product kinds of their format (``dot.py``): they take the convs a tile
register block can compute (ungrouped, undilated, kernels 1 to 4 columns wide, 16-channel
input blocks, output rows that a tile of 4 to 16 rows divides) when the target's tiles
multiply the format (AMX-INT8, AMX-BF16); the dot-product kinds (VNNI, AVX-512 BF16) take the
rest. Only the AMX spaces and the generic one schedule these ops. On ResNet-50's int8 convs
(Sapphire-Rapids-class Xeon, 2 threads, 2026-12-05) the VNNI kernels ran 64→64 3×3 at 56² in
0.20 ms, the AMX ones in 0.096; 512→128 1×1 at 28² 0.081 against 0.042.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from tvm import relax
from tvm.relax import BlockBuilder, Expr

from convtune.schedules.ops.amx import tile_rows
from convtune.schedules.ops.amx_conv import (
    AMX_DATA_BLOCK,
    STEM_DATA_BLOCK,
    amx_block_name,
    amx_refusal,
    conv2d_nchwc_amx,
    pack_weight,
    stem_refusal,
    steps_of,
    taps_of,
)
from convtune.schedules.ops.dot_conv import BF16, DOT_LANES, INT8, DotFormat

from ..tile_blocks import TILE_BLOCK
from .base import ConvKind, ConvOperands, ConvSite, Decision
from .dot import stem_pixels
from .winograd import OUT_ELEMWISE_FUSABLE

#: The output blocks the op writes: one accumulator tile's 16 channels, or four.
AMX_OUT_BLOCKS = (DOT_LANES, TILE_BLOCK)


def data_blocks(fmt: DotFormat) -> tuple[int, ...]:
    """The data blocks the op reads in ``fmt``: 16 channels, and for u8 a whole tile row
    (``tile_blocks.py``; 64 bf16 channels would be two rows)."""
    return (AMX_DATA_BLOCK, TILE_BLOCK) if fmt is INT8 else (AMX_DATA_BLOCK,)


def _tiles_multiply(site: ConvSite, fmt: DotFormat) -> bool:
    """Whether the conv reads ``fmt``'s data and the target's tiles multiply that format."""
    return str(site.call.args[0].ty.dtype) == fmt.data_dtype and fmt.precision in site.amx


class AmxKind(ConvKind):
    """The AMX conv of one dot format."""

    fmt: ClassVar[DotFormat]
    #: The layout plan's reason for a conv this kind blocks.
    reason: ClassVar[str]

    def decide(self, site: ConvSite) -> Decision | None:
        if not _tiles_multiply(site, self.fmt):
            return None
        refusal = amx_refusal(
            site.x_shape[1], site.w_shape[0], site.w_shape[2:], site.attrs.dilation, site.groups
        )
        out_width = int(site.call.ty.shape[3])
        if refusal or not site.constant_weight:
            return None
        if site.in_block not in data_blocks(self.fmt) or site.out_block not in AMX_OUT_BLOCKS:
            return None
        if tile_rows(out_width) is None:  # no tile of 4 to 16 rows divides it: zmm kernels'
            return None
        return Decision(True, self.reason)

    def computed_columns(self, site: ConvSite) -> int:
        width, block = site.w_shape[3], site.in_block or AMX_DATA_BLOCK
        return taps_of(width, self.fmt, block) * steps_of(width, self.fmt, block)

    def build(self, bb: BlockBuilder, site: ConvSite, operands: ConvOperands) -> Expr:
        assert operands.data_block in data_blocks(self.fmt)
        return amx_call(bb, operands, site, self.fmt)


def amx_call(bb: BlockBuilder, operands: ConvOperands, site: ConvSite, fmt: DotFormat) -> Expr:
    """The AMX op of ``fmt`` on ``operands.data`` (``NCHW{operands.data_block}c``) with the
    site's weight packed, ``NCHW{operands.out_block}c`` out."""
    attrs = site.attrs
    block = operands.data_block
    assert block is not None
    return bb.call_te(
        conv2d_nchwc_amx,
        operands.data,
        relax.const(pack_weight(site.weight_array(), fmt, block), fmt.weight_dtype),
        attrs.strides,
        attrs.padding,
        site.w_shape[3],
        operands.out_block,
        primfunc_name_hint=amx_block_name(fmt),
        # Fusable with its elementwise epilogue, like a conv (winograd.py).
        primfunc_attrs={"op_pattern": OUT_ELEMWISE_FUSABLE},
    )


class Int8AmxKind(AmxKind):
    name: ClassVar[str] = "int8-amx"
    fmt: ClassVar[DotFormat] = INT8
    reason: ClassVar[str] = "u8×s8→s32 (AMX tiles)"


class Bf16AmxKind(AmxKind):
    name: ClassVar[str] = "bf16-amx"
    fmt: ClassVar[DotFormat] = BF16
    reason: ClassVar[str] = "bf16×bf16→fp32 (AMX tiles)"


class AmxStemKind(ConvKind):
    """The RGB stem of one dot format on AMX tiles: NCHW in (at most 4 channels), padded to
    ``NCHW4c`` here, ``NCHW16c`` out; the precision rewrites make a stem u8 or bf16 only where
    :func:`stem_refusal` allows it, so every such conv is one this kind blocks."""

    reads_blocked: ClassVar[bool] = False
    fmt: ClassVar[DotFormat]
    reason: ClassVar[str]

    def decide(self, site: ConvSite) -> Decision | None:
        if not _tiles_multiply(site, self.fmt):
            return None
        out_width = int(site.call.ty.shape[3])
        refusal = stem_refusal(
            site.x_shape, site.w_shape, out_width, site.attrs.dilation, site.groups, self.fmt
        )
        if refusal or not site.constant_weight or site.out_block not in AMX_OUT_BLOCKS:
            return None
        return Decision(True, self.reason)

    def computed_in_channels(self, site: ConvSite) -> int:
        return STEM_DATA_BLOCK

    def build(self, bb: BlockBuilder, site: ConvSite, operands: ConvOperands) -> Expr:
        pixels = stem_pixels(bb, operands.data, site.x_shape)
        stem = replace(operands, data=pixels, data_block=STEM_DATA_BLOCK)
        return amx_call(bb, stem, site, self.fmt)


class Int8AmxStemKind(AmxStemKind):
    name: ClassVar[str] = "int8-amx-stem"
    fmt: ClassVar[DotFormat] = INT8
    reason: ClassVar[str] = "u8×s8→s32 stem (AMX tiles, NCHW4c in)"


class Bf16AmxStemKind(AmxStemKind):
    name: ClassVar[str] = "bf16-amx-stem"
    fmt: ClassVar[DotFormat] = BF16
    reason: ClassVar[str] = "bf16×bf16→fp32 stem (AMX tiles, NCHW4c in)"
