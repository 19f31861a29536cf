"""Local response normalization (LRN: AlexNet, ZFNet, GoogLeNet) as one kernel, NCHW or blocked.

``y = x / (bias + α/size · Σ x²)^β``, the sum over ``size`` neighbouring channels (ONNX's LRN).
TVM's ONNX frontend imports it as eight ops (square, expand_dims, a 3-D average pool over
channels, squeeze, scale, add, power, divide) which ran as five NCHW kernels between layout
transforms: 3.0 of AlexNet's 19.2 ms and 4.1 of ZFNet's 31.7 on an AMX Xeon VM (2026-12-05),
where onnxruntime's own LRN takes 3.5 ms for 96×54×54.

Blocked (``NCHW{b}c``), a channel's neighbours may lie in the next or previous block, at the
same pixel. Per pixel the kernel squares three whole vectors, the previous block's, its own and
the next one's (:data:`WINDOW_BLOCK`, zero beyond the first and last block), and reads each tap
as an unaligned vector of those ``3b`` squares, all lanes of the block at once (the space in
``spaces/lrn.py`` squares a whole row before normalizing it)::

    for n, c_outer, h in parallel:
        for w:
            squares[w, k·b : (k+1)·b] = x[c_outer - 1 + k, h, w, :]²     for k < 3 (vectors)
        for w:
            y[w, :] = x[w, :] / (bias + α/size · Σ_tap squares[w, b + tap : 2b + tap])^β
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tvm import te, tirx

if TYPE_CHECKING:
    from tvm.tirx import PrimExpr as Expr

#: The block of the blocked kernel's squares of three blocks (its own and its neighbours).
WINDOW_BLOCK = "lrn_window"
#: The block of the normalization (both kernels).
LRN_BLOCK = "lrn"


@dataclass(frozen=True)
class LrnParams:
    """An LRN's window (``before`` channels below a channel and ``size - 1 - before`` above it)
    and constants."""

    size: int
    before: int
    alpha: float
    beta: float
    bias: float

    @property
    def taps(self) -> range:
        """The channel offsets the window sums."""
        return range(-self.before, self.size - self.before)


# The taps beyond the first and last channel read nothing: ``if_then_else`` guards its load
# (a branch on the scalar condition), where a ``Select`` of a clamped index did not: TVM's
# simplifier proved the clamp away under the Select's condition and the vector load ran for the
# first block too, a block before the buffer (a segfault in AlexNet, 2026-12-05).


def _normalized(x: Expr, square_sum: Expr, params: LrnParams) -> Expr:
    f32 = "float32"
    scale = tirx.const(params.alpha / params.size, f32)
    base = tirx.const(params.bias, f32) + square_sum * scale
    return x / tirx.power(base, tirx.const(params.beta, f32))


def lrn_nchw(x: te.Tensor, params: LrnParams) -> te.Tensor:
    """The LRN of an NCHW tensor: its taps read rows of neighbouring channels, a vector along
    the width each."""
    _, channels, _, _ = (int(d) for d in x.shape)
    zero = tirx.const(0.0, "float32")

    def square(n: Expr, c: Expr, h: Expr, w: Expr) -> Expr:
        value = x[n, c, h, w]
        return te.if_then_else(tirx.all(c >= 0, c < channels), value * value, zero)

    def compute(n: Expr, c: Expr, h: Expr, w: Expr) -> Expr:
        total = square(n, c + params.taps[0], h, w)
        for tap in params.taps[1:]:
            total = total + square(n, c + tap, h, w)
        return _normalized(x[n, c, h, w], total, params)

    return te.compute(x.shape, compute, name=LRN_BLOCK, tag=LRN_BLOCK)


def lrn_blocked(x: te.Tensor, channels: int, params: LrnParams) -> te.Tensor:
    """The LRN of an ``NCHW{b}c`` tensor of ``channels`` channels (the module docstring)."""
    n_size, blocks, height, width, block = (int(d) for d in x.shape)
    zero = tirx.const(0.0, "float32")
    if params.before > block or params.size - 1 - params.before > block:
        raise ValueError(f"an LRN window of {params.size} reaches past the neighbouring blocks")

    def square(n: Expr, cb: Expr, h: Expr, w: Expr, k: Expr, lane: Expr) -> Expr:
        # k = 0: the previous block's lanes, 1: this block's, 2: the next block's.
        source = cb - 1 + k
        value = x[n, source, h, w, lane]
        return te.if_then_else(tirx.all(source >= 0, source < blocks), value * value, zero)

    squares = te.compute((n_size, blocks, height, width, 3, block), square, name=WINDOW_BLOCK)

    def compute(n: Expr, cb: Expr, h: Expr, w: Expr, lane: Expr) -> Expr:
        # Flattened, (j // b, j % b) of the squares is j: the tap's vector starts at b + tap.
        taps = [block + lane + tap for tap in params.taps]
        total = squares[n, cb, h, w, taps[0] // block, taps[0] % block]
        for j in taps[1:]:
            total = total + squares[n, cb, h, w, j // block, j % block]
        return _normalized(x[n, cb, h, w, lane], total, params)

    return te.compute(x.shape, compute, name=LRN_BLOCK, tag=LRN_BLOCK)


__all__ = ["LRN_BLOCK", "WINDOW_BLOCK", "LrnParams", "lrn_blocked", "lrn_nchw"]
