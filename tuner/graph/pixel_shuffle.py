"""Depth-to-space (a pixel shuffle in DCR order) and ShuffleNet's channel shuffle carried on a
blocked tensor.

DB text detectors and U-Nets upsample with 2×2 stride-2 ConvTransposes, which the normalizer turns
into a 1×1 conv to ``s1·s2·C`` channels ordered (i, j, c) and a DCR depth-to-space
(``subpixel-convtranspose``); ONNX's DepthToSpace in DCR mode imports as the same three ops:
reshape to (N, s1, s2, C, H, W), permute (0, 3, 4, 1, 5, 2), reshape to (N, C, H·s1, W·s2).
When the block b divides C, channel (i, j, c) of ``NCHW{b}c`` lies in block (i·s2 + j)·C/b + c/b
at lane c mod b, so the shuffle moves whole b-lane vectors and never leaves the layout:

    (N, s1·s2·C/b, H, W, b) -> (N, s1, s2, C/b, H, W, b) -> (N, C/b, H, s1, W, s2, b)
                            -> (N, C/b, H·s1, W·s2, b)

In NCHW it cost PP-OCRv5's detector a transform to NCHW at 80² and one back at 160² around each
shuffle (0.20 + 0.34 ms of its 15 ms kernels, Zen 3, 2026-12-03).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from tvm import relax
from tvm.relax import Expr

#: The DCR depth-to-space permutation of (N, s1, s2, C, H, W).
DCR_AXES = (0, 3, 4, 1, 5, 2)
#: The channel shuffle's permutation of (N, g, C/g, H, W).
CHANNEL_SHUFFLE_AXES = (0, 2, 1, 3, 4)


def _channel_split(
    src_shape: tuple[int, ...], out_shape: tuple[int, ...] | None, count: int
) -> tuple[int, ...] | None:
    """The ``count`` dims a reshape of NCHW ``src_shape`` to ``out_shape`` splits the channels
    into (N, H and W kept), or None when the reshape is not such a split."""
    if out_shape is None or len(out_shape) != count + 3 or len(src_shape) != 4:
        return None
    n, channels, h, w = src_shape
    dims = tuple(out_shape[1:-2])
    if (out_shape[0], *out_shape[-2:]) != (n, h, w) or math.prod(dims) != channels:
        return None
    return dims


@dataclass(frozen=True)
class Shuffle:
    """A depth-to-space of a blocked tensor of ``s1·s2·channels`` channels, block ``block``."""

    axes: ClassVar[tuple[int, ...]] = DCR_AXES
    n: int
    s1: int
    s2: int
    channels: int
    h: int
    w: int
    block: int

    @classmethod
    def of_split(
        cls, src_shape: tuple[int, ...], block: int, out_shape: tuple[int, ...] | None
    ) -> Shuffle | None:
        """The shuffle whose first reshape takes an NCHW ``src_shape`` to ``out_shape``; None if
        that reshape is not a (s1, s2, C) split of the channels with ``block`` dividing C."""
        dims = _channel_split(src_shape, out_shape, 3)
        if dims is None or dims[2] % block:
            return None
        n, _, h, w = src_shape
        s1, s2, channels = dims
        return cls(n, s1, s2, channels, h, w, block)

    @property
    def merged_shape(self) -> tuple[int, int, int, int]:
        """The NCHW shape of the result."""
        return (self.n, self.channels, self.h * self.s1, self.w * self.s2)

    def split(self, blocked: Expr) -> Expr:
        return relax.op.reshape(
            blocked,
            (self.n, self.s1, self.s2, self.channels // self.block, self.h, self.w, self.block),
        )

    def move(self, split: Expr) -> Expr:
        return relax.op.permute_dims(split, [*DCR_AXES, 6])

    def merge(self, moved: Expr) -> Expr:
        n, c, h, w = self.merged_shape
        return relax.op.reshape(moved, (n, c // self.block, h, w, self.block))

    def unblocked(self, value: Expr, moved: bool) -> Expr:
        """The value an NCHW consumer expects from the split (``moved`` False: (N, s1, s2, C, H,
        W)) or the permuted stage ((N, C, H, s1, W, s2)), from its blocked form."""
        if moved:  # (N, C/b, H, s1, W, s2, b) -> (N, C/b, b, H, s1, W, s2)
            lanes_in = relax.op.permute_dims(value, [0, 1, 6, 2, 3, 4, 5])
            shape = (self.n, self.channels, self.h, self.s1, self.w, self.s2)
        else:  # (N, s1, s2, C/b, H, W, b) -> (N, s1, s2, C/b, b, H, W)
            lanes_in = relax.op.permute_dims(value, [0, 1, 2, 3, 6, 4, 5])
            shape = (self.n, self.s1, self.s2, self.channels, self.h, self.w)
        return relax.op.reshape(lanes_in, shape)


def shuffled_position(channel: Any, channels: int, groups: int) -> Any:
    """Where source channel ``i·C/g + k`` of ``channels`` lands after the channel shuffle in
    ``groups`` (g): channel ``k·g + i``."""
    per_group = channels // groups
    return channel % per_group * groups + channel // per_group


@dataclass(frozen=True)
class ChannelShuffle:
    """ShuffleNet's channel shuffle of a blocked tensor of ``channels`` channels in ``groups``:
    reshape to (N, g, C/g, H, W), swap the two channel axes, reshape back, so channel
    ``k·g + i`` of the result is channel ``i·C/g + k`` of the source. Lanes move between
    blocks, so the split and the swap stay symbolic (the blocked source carried along) and the
    merge is one gather from block to block (a ``layout_transform`` by that index map; the
    layout pass writes an fp32 one as two register transposes instead). In NCHW
    the shuffle cost a transform to NCHW before it and one back after it, and kept the
    depthwise conv that reads it NCHW."""

    axes: ClassVar[tuple[int, ...]] = CHANNEL_SHUFFLE_AXES
    n: int
    groups: int
    channels: int
    h: int
    w: int
    block: int

    @classmethod
    def of_split(
        cls, src_shape: tuple[int, ...], block: int, out_shape: tuple[int, ...] | None
    ) -> ChannelShuffle | None:
        """The shuffle whose first reshape takes an NCHW ``src_shape`` to ``out_shape``, or
        None if that reshape is not a (g, C/g) split of the channels."""
        dims = _channel_split(src_shape, out_shape, 2)
        if dims is None or src_shape[1] % block:
            return None
        n, channels, h, w = src_shape
        return cls(n, dims[0], channels, h, w, block)

    @property
    def merged_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.channels, self.h, self.w)

    def split(self, blocked: Expr) -> Expr:
        return blocked

    def move(self, split: Expr) -> Expr:
        return split

    def merge(self, moved: Expr) -> Expr:
        block = self.block

        def index(n: Any, cb: Any, h: Any, w: Any, b: Any) -> tuple[Any, ...]:
            shuffled = shuffled_position(cb * block + b, self.channels, self.groups)
            return (n, shuffled // block, h, w, shuffled % block)

        return relax.op.layout_transform(moved, index)

    def unblocked(self, value: Expr, moved: bool) -> Expr:
        """The value an NCHW consumer expects from the split or the swapped stage, from the
        blocked source."""
        block = self.block
        nchw = relax.op.layout_transform(value, lambda n, c, h, w, b: (n, c * block + b, h, w))
        split = relax.op.reshape(
            nchw, (self.n, self.groups, self.channels // self.groups, self.h, self.w)
        )
        return relax.op.permute_dims(split, list(self.axes)) if moved else split


__all__ = ["CHANNEL_SHUFFLE_AXES", "DCR_AXES", "ChannelShuffle", "Shuffle", "shuffled_position"]
