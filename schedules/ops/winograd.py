"""Winograd F(m×m, 3×3) for 3×3 stride-1 convolutions: fewer multiplies, other rounding.

F(2×2,3×3) does 16 multiplies per 2×2 output tile and input channel where the direct conv does
36 (2.25× fewer); F(4×4,3×3) 36 for 144 (4×). The price: the input and output tiles are
transformed (memory-bound passes over the activations), the batched GEMM in the middle has
``CI`` as its only reduction, and rounding grows with the tile (the transform matrices of
F(4×4) hold 1/4·1/6-style coefficients).

The weights are transformed at build time: :func:`transform_weight` computes ``G·w·Gᵀ`` in
float64 with numpy and the graph holds the result as a constant, so no weight transform runs at
inference. This module is the arithmetic (TOPI's Cook–Toom matrices, the error bound); the blocked
kernel and its schedule space are ``winograd_nchwc.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

#: Output tile sizes the search may choose: F(2×2,3×3) and F(4×4,3×3).
TILE_SIZES = (2, 4)
KERNEL = 3


def transform_matrices(tile: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TOPI's (A, B, G) for F(tile×tile, 3×3), in float64."""
    points = _interpolation_points(tile + KERNEL - 2)
    a, b, g = _cook_toom_convolution(points, tile, KERNEL)
    return np.asarray(a, np.float64), np.asarray(b, np.float64), np.asarray(g, np.float64)


def transform_weight(weight: np.ndarray, tile: int) -> np.ndarray:
    """OIHW 3×3 weights → ``(α, α, CI, CO)`` = ``G·w·Gᵀ``, computed once, at build time."""
    _, _, g = transform_matrices(tile)
    packed = np.einsum("ek,oikl,nl->enio", g, weight.astype(np.float64), g)
    return np.ascontiguousarray(packed.astype(weight.dtype))


def applies(kernel: Sequence[int], strides: Any, dilation: Any, groups: int) -> bool:
    """Whether a conv can run as Winograd here: dense, 3×3, stride 1, no dilation."""
    return (
        groups == 1
        and tuple(kernel) == (KERNEL, KERNEL)
        and all(int(s) == 1 for s in strides)
        and all(int(d) == 1 for d in dilation)
    )


#: Measured bound on max|Winograd − direct| / max|direct| for fp32 with ResNet-like data (He
#: weights, unit-normal activations): the tile's transforms scale rounding by their coefficients.
#: For bf16 (``V`` and ``U`` rounded to bf16, sums in fp32) against the direct conv of the same
#: bf16 inputs, a numpy simulation (64→32 channels, 16×16, He weights) gave 0.50% for F(2×2)
#: and 2.3% for F(4×4), where the bf16 direct conv is 0.23% off the fp32 one: the inverse
#: transform's coefficients (up to 8 in F(4×4)) scale the rounding of each product.
_ERROR_BOUND = {"fp32": {2: 1e-5, 4: 1e-4}, "bf16": {2: 1e-2, 4: 4e-2}}


def atol(tile: int, precision: str = "fp32") -> float:
    """Tolerance of F(tile×tile,3×3) against the direct conv, relative to max|output|."""
    return _ERROR_BOUND[precision][tile]
