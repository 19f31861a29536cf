"""Winograd F(m×m, 3×3): an alternative algorithm of dense blocked 3×3 stride-1 convs with a
constant weight, run where the caller asks for it (``LayoutPlan.winograd_tiles``; the weight is
transformed here, at build time; ``schedules/spaces/winograd_nchwc.py``)."""

from __future__ import annotations

from typing import ClassVar

from tvm import relax
from tvm.relax import BlockBuilder, Expr

from convtune.schedules.ops import winograd
from convtune.schedules.ops.conv_call import attr_dtype
from convtune.schedules.ops.winograd_conv import conv2d_winograd_nchwc, pack_weight

from .base import ConvKind, ConvOperands, ConvSite, Decision

#: TVM's ``OpPatternKind::kOutEWiseFusable``: fuses elementwise consumers, as a conv does.
OUT_ELEMWISE_FUSABLE = 4


class WinogradKind(ConvKind):
    name: ClassVar[str] = "winograd"
    variant_of: ClassVar[str | None] = "dense"

    def decide(self, site: ConvSite) -> Decision | None:
        attrs = site.attrs
        eligible = site.constant_weight and winograd.applies(
            site.w_shape[2:], attrs.strides, attrs.dilation, site.groups
        )
        return Decision(True) if eligible else None

    def build(self, bb: BlockBuilder, site: ConvSite, operands: ConvOperands) -> Expr:
        tile, attrs, weight = operands.tile, site.attrs, site.call.args[1]
        return bb.call_te(
            conv2d_winograd_nchwc,
            operands.data,
            relax.const(
                pack_weight(site.weight_array(), tile, operands.out_block), str(weight.ty.dtype)
            ),
            attrs.padding,
            tile,
            attr_dtype(attrs.out_dtype) or str(site.call.ty.dtype),
            primfunc_name_hint=f"winograd{tile}_nchwc",
            # Fusable with its elementwise epilogue, like a conv: TVM's analysis of a
            # multi-block function would call it opaque.
            primfunc_attrs={"op_pattern": OUT_ELEMWISE_FUSABLE},
        )
