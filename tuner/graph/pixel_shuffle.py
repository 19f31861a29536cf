"""Depth-to-space (a pixel shuffle in DCR order) carried on a blocked tensor.

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

from dataclasses import dataclass

from tvm import relax
from tvm.relax import Expr

#: The DCR depth-to-space permutation of (N, s1, s2, C, H, W).
DCR_AXES = (0, 3, 4, 1, 5, 2)


@dataclass(frozen=True)
class Shuffle:
    """A depth-to-space of a blocked tensor of ``s1·s2·channels`` channels, block ``block``."""

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
        if out_shape is None or len(out_shape) != 6 or len(src_shape) != 4:
            return None
        n, s1, s2, channels, h, w = out_shape
        if (n, h, w) != (src_shape[0], src_shape[2], src_shape[3]):
            return None
        if s1 * s2 * channels != src_shape[1] or channels % block:
            return None
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


__all__ = ["DCR_AXES", "Shuffle"]
