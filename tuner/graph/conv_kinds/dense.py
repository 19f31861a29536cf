"""Dense blocked convs (``NCHW{a}c`` in, ``OIHW{a}i{b}o`` weights, ``NCHW{b}c`` out): every
conv whose input and output channels per group divide by their blocks. The catch-all kind, last
in the table; otherwise the conv stays NCHW (padding channels up to a block would only compute
zeros)."""

from __future__ import annotations

from typing import ClassVar

from tvm import relax
from tvm.ir.expr import GenericConst
from tvm.relax import BlockBuilder, Call, Expr

from convtune.schedules.ops.dense import (
    block_weight,
    blocked_conv2d,
    is_blocked_conv2d_call,
    legalize_blocked_conv2d,
    weight_to_blocked,
)

from .base import ConvKind, ConvOperands, ConvSite, Decision


class DenseKind(ConvKind):
    name: ClassVar[str] = "dense"

    def decide(self, site: ConvSite) -> Decision | None:
        x, w, groups = site.x_shape, site.w_shape, site.groups
        if (
            site.in_block is None
            or site.out_block is None
            or (x[1] // groups) % site.in_block
            or (w[0] // groups) % site.out_block
        ):
            per_group = f" per group (groups={groups})" if groups != 1 else ""
            return Decision(
                False,
                f"channels {x[1] // groups}→{w[0] // groups}{per_group} "
                f"not multiples of {site.smallest} (padding them would compute zeros)",
            )
        return Decision(True)

    def build(self, bb: BlockBuilder, site: ConvSite, operands: ConvOperands) -> Expr:
        a, b = operands.data_block, operands.out_block
        assert a is not None
        weight = operands.weight
        if isinstance(weight, GenericConst):
            packed: Expr = relax.const(
                block_weight(weight.value.numpy(), a, b), str(weight.ty.dtype)
            )
        else:
            packed = bb.emit(relax.op.layout_transform(weight, weight_to_blocked(a, b)))
        return blocked_conv2d(operands.data, packed, site.attrs, a, b)

    def legalizes(self, call: Call) -> bool:
        return is_blocked_conv2d_call(call)

    def legalize(self, bb: BlockBuilder, call: Call) -> Expr:
        return legalize_blocked_conv2d(bb, call)
