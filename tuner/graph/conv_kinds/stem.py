"""Convs with fewer input channels than a block (the RGB stem; squeeze-excitation's excitation
of one pixel): NCHW in, blocked out (``schedules/spaces/stem_nchw_nchwc.py``)."""

from __future__ import annotations

from typing import ClassVar

from tvm.relax import BlockBuilder, Call, Expr

from convtune.schedules.ops.stem import (
    blocks_output_only,
    is_output_blocked,
    legalize,
    output_blocked_conv,
)

from .base import ConvKind, ConvOperands, ConvSite, Decision


class StemKind(ConvKind):
    name: ClassVar[str] = "stem"
    reads_blocked: ClassVar[bool] = False

    def decide(self, site: ConvSite) -> Decision | None:
        x, w = site.x_shape, site.w_shape
        if (
            site.constant_weight
            and site.out_block is not None
            and blocks_output_only(
                x[1],
                w[0],
                site.groups,
                site.out_block,
                unblockable_pixel=site.in_block is None
                and tuple(x[2:]) == (1, 1)
                and tuple(w[2:]) == (1, 1),
                unblockable_input=site.in_block is None,
            )
        ):
            return Decision(True, f"{x[1]} input channels: NCHW in, blocked out (stem kernel)")
        return None

    def build(self, bb: BlockBuilder, site: ConvSite, operands: ConvOperands) -> Expr:
        return output_blocked_conv(
            operands.data, site.weight_array(), site.attrs, operands.out_block
        )

    def legalizes(self, call: Call) -> bool:
        attrs = call.attrs
        return is_output_blocked(str(attrs.data_layout), str(attrs.out_layout))

    def legalize(self, bb: BlockBuilder, call: Call) -> Expr:
        return legalize(bb, call)
