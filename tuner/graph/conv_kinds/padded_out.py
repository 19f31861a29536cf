"""Convs whose output channels no block divides: detection, segmentation and OCR heads (1, 2,
4, 12, 42, 255 output channels) and narrow stems (MTCNN's 3→10). The filters are padded with
zero filters to a multiple of the narrowest block once, at build time; the conv runs blocked
(``schedules/spaces/nchwc_*``, or the stem space when its input is NCHW), and its real channels
are written back NCHW. And convs whose outputs are held in half-register blocks (24, 40, 72,
120 channels on AVX-512) on CPUs whose whole-register FMA does twice the work
(:class:`PaddedWideKind`).

Without it such a conv stayed NCHW: its input was transformed out of the blocked layout and the
conv ran in the generic space with the output channels as its only parallel, vectorizable axis
(issue #31: a 96→1 1×1 head at 52×52 took 4.0 ms against onnxruntime's 0.27; MTCNN P-Net's
3→10 3×3 at 64×64 0.105 ms against 0.042 on a Zen 4, a third of the model's time). Padding
computes at most ``block - 1`` zero channels, a waste bounded by ``(block - 1) / channels``.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from tvm import relax
from tvm.relax import BlockBuilder, Expr

from convtune.schedules.ops import winograd
from convtune.schedules.ops.dense import block_weight, blocked_conv2d
from convtune.schedules.ops.stem import few_input_channels, output_blocked_conv

from .base import ConvKind, ConvOperands, ConvSite, Decision


def padded_channels(channels: int, block: int) -> int:
    """``channels`` rounded up to a multiple of ``block``."""
    return -(-channels // block) * block


def _padded_weight(site: ConvSite, block: int | None = None) -> np.ndarray:
    """The conv's OIHW weight with zero filters up to ``block`` (default: the narrowest)."""
    weight = site.weight_array()
    padded = np.zeros((padded_channels(weight.shape[0], block or site.smallest), *weight.shape[1:]))
    padded[: weight.shape[0]] = weight
    return padded.astype(weight.dtype)


def _real_channels_nchw(bb: BlockBuilder, conv: Expr, block: int, channels: int) -> Expr:
    """The first ``channels`` channels of the blocked ``conv`` output, NCHW."""
    nchw = bb.emit(relax.op.layout_transform(conv, lambda n, c, h, w, i: (n, c * block + i, h, w)))
    return relax.op.strided_slice(nchw, axes=[1], begin=[0], end=[channels])


class PaddedOutputKind(ConvKind):
    """A blocked input: the dense blocked conv with zero filters."""

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
        weight = _padded_weight(site)
        packed = relax.const(block_weight(weight, a, b), str(weight.dtype))
        conv = bb.emit(blocked_conv2d(operands.data, packed, site.attrs, a, b))
        return _real_channels_nchw(bb, conv, b, site.w_shape[0])


class PaddedStemKind(PaddedOutputKind):
    """An NCHW input of few channels (the stem kind's inputs: fewer than a block, or a count no
    block divides up to the stem space's unrolled limit) and at least a narrowest block of
    outputs: the output-blocked stem conv with zero filters."""

    name: ClassVar[str] = "padded-stem"
    reads_blocked: ClassVar[bool] = False

    def decide(self, site: ConvSite) -> Decision | None:
        in_channels, channels = site.x_shape[1], site.w_shape[0]
        few = few_input_channels(in_channels, site.lanes, unblockable_input=site.in_block is None)
        if (
            site.groups != 1
            or site.out_block is not None
            or not site.constant_weight
            or not few
            or channels < site.smallest
        ):
            # Fewer outputs than the narrowest block (a 3 → 6 conv) fill less than a vector:
            # the generic space vectorizes such a conv along the width instead.
            return None
        padded = padded_channels(channels, site.smallest)
        return Decision(
            True,
            f"{in_channels} input channels, {channels} output channels computed as {padded}"
            " (zero filters): NCHW in, NCHW out (stem kernel)",
        )

    def build(self, bb: BlockBuilder, site: ConvSite, operands: ConvOperands) -> Expr:
        b = operands.out_block
        conv = bb.emit(output_blocked_conv(operands.data, _padded_weight(site), site.attrs, b))
        return _real_channels_nchw(bb, conv, b, site.w_shape[0])


class PaddedWideKind(ConvKind):
    """A dense conv whose output channels are held in half-register blocks, on a CPU whose
    whole-register FMA does twice a half register's work (``isa.full_width_fma``: Zen 5, Xeon
    Scalable; not Zen 4, whose 512-bit FMA is two 256-bit halves): computed with zero filters up
    to whole registers, then moved into the half blocks the rest of the island reads.

    In half blocks such a conv is capped at half the FMA peak: PP-OCRv6's stride-2 48→24 3×3 at
    160² ran at 36% of peak on a Zen 5, 0.72 ms against onnxruntime's 0.41 (2026-12-05), and at
    the same speed as onnxruntime's node on a Zen 4. Padding computes ``lanes/2`` zero channels
    at most, so only counts it wastes no more than a third of (24 channels as 32 and up) are
    padded. A 3×3 stride-1 conv is left to the dense kind, whose Winograd variant the search
    measures against it."""

    name: ClassVar[str] = "padded-wide"

    def decide(self, site: ConvSite) -> Decision | None:
        channels, lanes = site.w_shape[0], site.lanes
        padded = padded_channels(channels, lanes)
        if (
            not site.full_width_fma
            or site.groups != 1
            or not site.constant_weight
            or site.out_block is None
            or site.out_block == lanes
            or site.in_block is None
            or 3 * padded > 4 * channels
            or str(site.call.args[0].ty.dtype) != "float32"
            or winograd.applies(
                site.w_shape[2:], site.attrs.strides, site.attrs.dilation, site.groups
            )
        ):
            return None
        return Decision(
            True,
            f"{channels} output channels computed as {padded} in {lanes}-channel blocks"
            f" (zero filters), moved to NCHW{site.out_block}c",
        )

    def out_channels(self, site: ConvSite) -> int:
        return padded_channels(site.w_shape[0], site.lanes)

    def build(self, bb: BlockBuilder, site: ConvSite, operands: ConvOperands) -> Expr:
        a, b, half = operands.data_block, operands.out_block, site.out_block
        assert a is not None and half is not None
        weight = _padded_weight(site, b)
        packed = relax.const(block_weight(weight, a, b), str(weight.dtype))
        conv = bb.emit(blocked_conv2d(operands.data, packed, site.attrs, a, b))
        # Reshapes and a permutation rather than a layout_transform: FuseOps merges them with
        # the slice and the elementwise ops after it into one pass over the output.
        n, blocks, h, w, _ = (int(d) for d in conv.ty.shape.values)
        halves = b // half
        split = relax.op.reshape(conv, (n, blocks, h, w, halves, half))
        moved = relax.op.permute_dims(split, (0, 1, 4, 2, 3, 5))
        merged = relax.op.reshape(moved, (n, blocks * halves, h, w, half))
        return relax.op.strided_slice(merged, axes=[1], begin=[0], end=[site.w_shape[0] // half])
