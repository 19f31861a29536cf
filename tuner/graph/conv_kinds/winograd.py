"""Winograd F(m×m, 3×3): an alternative algorithm of dense blocked 3×3 stride-1 convs with a
constant weight, run where the caller asks for it (``LayoutPlan.winograd_tiles``; the weight is
transformed here, at build time; ``schedules/spaces/winograd_nchwc.py``).

Two variants: of fp32 convs (``dense``), and of ``--precision bf16`` convs (``bf16``), whose
transformed data and weights are bf16 and whose GEMM is ``vdpbf16ps`` over channel pairs. The
bf16 variant offers F(2×2) only: with ``V`` and ``U`` rounded to bf16, F(4×4)'s inverse
transform (coefficients up to 8) scales each product's rounding to 2.3% of a layer's largest
output in a numpy simulation (64→32 channels, He weights), F(2×2)'s to 0.50%, the bf16 direct
conv's 0.23% (``schedules/ops/winograd.py``); the model's tolerance is 3% of its output range.
"""

from __future__ import annotations

from typing import ClassVar

from tvm import relax
from tvm.relax import BlockBuilder, Expr

from convtune.schedules.ops import winograd
from convtune.schedules.ops.conv_call import attr_dtype
from convtune.schedules.ops.dot_conv import BF16
from convtune.schedules.ops.winograd_conv import conv2d_winograd_nchwc, pack_weight

from .base import ConvKind, ConvOperands, ConvSite, Decision

#: TVM's ``OpPatternKind::kOutEWiseFusable``: fuses elementwise consumers, as a conv does.
OUT_ELEMWISE_FUSABLE = 4


class WinogradKind(ConvKind):
    name: ClassVar[str] = "winograd"
    variant_of: ClassVar[str | None] = "dense"
    #: The output tiles m of the F(m×m, 3×3) kernels this variant offers.
    tiles: ClassVar[tuple[int, ...]] = winograd.TILE_SIZES
    #: Input channels one lane of the GEMM's dot product reduces (0: an fp32 FMA GEMM).
    dot_group: ClassVar[int] = 0

    def decide(self, site: ConvSite) -> Decision | None:
        attrs = site.attrs
        eligible = site.constant_weight and winograd.applies(
            site.w_shape[2:], attrs.strides, attrs.dilation, site.groups
        )
        return Decision(True) if eligible else None

    def build(self, bb: BlockBuilder, site: ConvSite, operands: ConvOperands) -> Expr:
        tile, attrs, weight = operands.tile, site.attrs, site.call.args[1]
        packed = pack_weight(site.weight_array(), tile, operands.out_block, self.dot_group)
        return bb.call_te(
            conv2d_winograd_nchwc,
            operands.data,
            relax.const(packed, str(weight.ty.dtype)),
            attrs.padding,
            tile,
            attr_dtype(attrs.out_dtype) or str(site.call.ty.dtype),
            primfunc_name_hint=f"{self.name.replace('-', '_')}{tile}_nchwc",
            # Fusable with its elementwise epilogue, like a conv: TVM's analysis of a
            # multi-block function would call it opaque.
            primfunc_attrs={"op_pattern": OUT_ELEMWISE_FUSABLE},
        )


class Bf16WinogradKind(WinogradKind):
    """Winograd of a bf16 conv (``--precision bf16``): bf16 data in, fp32 out like the direct
    bf16 kernel, the GEMM on ``vdpbf16ps``."""

    name: ClassVar[str] = "bf16-winograd"
    variant_of: ClassVar[str | None] = "bf16"
    tiles: ClassVar[tuple[int, ...]] = (2,)
    dot_group: ClassVar[int] = BF16.group
