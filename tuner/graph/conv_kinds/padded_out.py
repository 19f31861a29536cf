"""Convs whose output channels no block divides, with a blockable input: detection,
segmentation and OCR heads (1, 2, 4, 12, 42, 255 output channels). The filters are padded with
zero filters to a multiple of the narrowest block once, at build time; the conv runs blocked like
a dense one (``schedules/spaces/nchwc_*``), and its real channels are written back NCHW.

Without it such a conv stayed NCHW: its input was transformed out of the blocked layout and the
conv ran in the generic space with the output channels as its only parallel, vectorizable axis
(issue #31: a 96→1 1×1 head at 52×52 took 4.0 ms against onnxruntime's 0.27). Padding computes
at most ``block - 1`` zero channels, a waste bounded by ``(block - 1) / channels``.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from tvm import relax
from tvm.relax import BlockBuilder, Expr

from convtune.schedules.ops.dense import block_weight, blocked_conv2d

from .base import ConvKind, ConvOperands, ConvSite, Decision


def padded_channels(channels: int, block: int) -> int:
    """``channels`` rounded up to a multiple of ``block``."""
    return -(-channels // block) * block


class PaddedOutputKind(ConvKind):
    name: ClassVar[str] = "padded-out"
    writes_blocked: ClassVar[bool] = False

    def decide(self, site: ConvSite) -> Decision | None:
        channels = site.w_shape[0]
        if (
            site.groups != 1
            or site.out_block is not None
            or site.in_block is None
            or not site.constant_weight
        ):
            return None
        padded = padded_channels(channels, site.smallest)
        return Decision(
            True, f"{channels} output channels computed as {padded} (zero filters), NCHW out"
        )

    def out_channels(self, site: ConvSite) -> int:
        return padded_channels(site.w_shape[0], site.smallest)

    def build(self, bb: BlockBuilder, site: ConvSite, operands: ConvOperands) -> Expr:
        a, b = operands.data_block, operands.out_block
        assert a is not None
        weight = site.weight_array()
        channels = weight.shape[0]
        padded = np.zeros((self.out_channels(site), *weight.shape[1:]), weight.dtype)
        padded[:channels] = weight
        packed = relax.const(block_weight(padded, a, b), str(weight.dtype))
        conv = bb.emit(blocked_conv2d(operands.data, packed, site.attrs, a, b))
        nchw = bb.emit(relax.op.layout_transform(conv, lambda n, c, h, w, i: (n, c * b + i, h, w)))
        return relax.op.strided_slice(nchw, axes=[1], begin=[0], end=[channels])
