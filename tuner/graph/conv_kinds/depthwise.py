"""Depthwise convs (groups = channels, one filter per channel) of blockable channels: blocked in
and out (``schedules/spaces/depthwise_nchwc.py``)."""

from __future__ import annotations

from typing import ClassVar

from tvm.relax import BlockBuilder, Call, Expr

from convtune.schedules.ops.channel_blocking import transposable
from convtune.schedules.ops.depthwise import (
    blocked_depthwise_conv2d,
    is_blockable_depthwise,
    is_blocked_depthwise_call,
    legalize_depthwise_conv2d,
)

from .base import ConvKind, ConvOperands, ConvSite, Decision


class DepthwiseKind(ConvKind):
    name: ClassVar[str] = "depthwise"

    def decide(self, site: ConvSite) -> Decision | None:
        x, w, groups = site.x_shape, site.w_shape, site.groups
        if not (groups != 1 and groups == x[1] and w[1] == 1):
            return None
        if not (
            site.constant_weight
            and site.in_block is not None
            and is_blockable_depthwise(x, w, groups, site.in_block)
        ):
            return Decision(
                False, f"depthwise conv of {x[1]} channels, not a multiple of {site.smallest}"
            )
        dtype = str(site.call.args[0].ty.dtype)
        if not site.input_blocked and not transposable(site.in_block, site.lanes, dtype):
            # A depthwise conv reads its input once and writes its output once; alone in an
            # NCHW region it adds two transforms, each as much memory traffic again as the conv
            # itself. Only the register transposes (schedules/ops/channel_blocking.py) are
            # cheap enough: ShuffleNet's 112-channel 3×3 stride 2 at 56² and 136-channel
            # stride 1 at 28², blocked alone between them, ran in 0.75× and 0.69× the NCHW
            # time (one-unit models, paired, Zen 4); with TVM's gathers they ran 1.08× and
            # 1.57×. In the whole ShuffleNet the gain paid for its transforms only once the
            # channel shuffle before each conv moved into the transform (layout.py): 0.91×.
            return Decision(
                False, "depthwise conv with an NCHW input (blocked alone: 2 transforms)"
            )
        return Decision(True, "depthwise kernel (schedules/spaces/depthwise_nchwc.py)")

    def build(self, bb: BlockBuilder, site: ConvSite, operands: ConvOperands) -> Expr:
        assert operands.data_block is not None
        return blocked_depthwise_conv2d(
            operands.data, site.weight_array(), site.attrs, operands.data_block
        )

    def legalizes(self, call: Call) -> bool:
        return len(str(call.attrs.data_layout)) != 4 and is_blocked_depthwise_call(call)

    def legalize(self, bb: BlockBuilder, call: Call) -> Expr:
        return legalize_depthwise_conv2d(bb, call)
