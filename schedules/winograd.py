"""Winograd F(m×m, 3×3) for 3×3 stride-1 convolutions: fewer multiplies, other rounding.

F(2×2,3×3) does 16 multiplies per 2×2 output tile and input channel where the direct conv does
36 (2.25× fewer); F(4×4,3×3) 36 for 144 (4×). The price: the input and output tiles are
transformed (memory-bound passes over the activations), the batched GEMM in the middle has
``CI`` as its only reduction, and rounding grows with the tile (the transform matrices of
F(4×4) hold 1/4·1/6-style coefficients).

TOPI's NCHW compute (``_conv2d_winograd_nchw_impl``) is used with the weights transformed at build
time: :func:`transform_weight` computes ``G·w·Gᵀ`` in float64 with numpy and the graph holds the
``(α, α, CI, CO)`` result as a constant, so no weight transform runs at inference. Its data-pack
and inverse-transform blocks carry MetaSchedule's CPU rules
(``s_tir.meta_schedule.cpu.conv2d_nchw_winograd_data_pack`` / ``_inverse``), which the generic
space applies; the batched GEMM is tiled by its multi-level tiling rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import te
from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.topi.nn.conv2d import _conv2d_winograd_nchw_impl
from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

#: Block names of TOPI's Winograd compute, which no direct convolution has.
WINOGRAD_BLOCKS = frozenset({"data_pack", "bgemm", "inverse"})
#: Output tile sizes the search may choose: F(2×2,3×3) and F(4×4,3×3).
TILE_SIZES = (2, 4)
KERNEL = 3


def is_winograd(mod: IRModule) -> bool:
    """Whether a task computes a Winograd convolution."""
    sch = Schedule(mod)
    names = {sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))}
    return names >= WINOGRAD_BLOCKS


def without_custom_rules(mod: IRModule) -> IRModule:
    """``mod`` with TOPI's ``schedule_rule`` block annotations removed, so the generic space's
    own rules tile every stage: with MetaSchedule's Winograd CPU rules applied, the evolutionary
    search of TVM 0.27 failed on these tasks ("The block no longer exists in the IRModule")."""
    sch = Schedule(mod)
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        if "schedule_rule" in sch.get(block).annotations:
            sch.unannotate(block, "schedule_rule")
    return sch.mod


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


def applies(kernel: tuple[int, int], strides: Any, dilation: Any, groups: int) -> bool:
    """Whether a conv can run as Winograd here: dense, 3×3, stride 1, no dilation."""
    return (
        groups == 1
        and tuple(kernel) == (KERNEL, KERNEL)
        and all(int(s) == 1 for s in strides)
        and all(int(d) == 1 for d in dilation)
    )


def conv2d_winograd(
    data: te.Tensor, packed: te.Tensor, padding: Any, tile: int, out_dtype: str
) -> te.Tensor:
    """TE compute: ``data`` NCHW, ``packed`` from :func:`transform_weight`, output NCHW.

    TOPI's compute reads whole input tiles: when the output is not a multiple of the tile it reads
    past the padded input (out of bounds; NaN in partial tiles, measured). The input is padded
    with zeros up to whole tiles here, and the output cropped back.
    """
    top, left, bottom, right = (int(p) for p in padding)
    batch, _, height, width = (int(d) for d in data.shape)
    out_h, out_w = height + top + bottom - KERNEL + 1, width + left + right - KERNEL + 1
    extra_h, extra_w = -out_h % tile, -out_w % tile
    full = _conv2d_winograd_nchw_impl(
        data, packed, (1, 1), [top, left, bottom + extra_h, right + extra_w], (1, 1), out_dtype,
        tile, pre_computed=True,
    )  # fmt: skip
    if not extra_h and not extra_w:
        return full
    return te.compute(
        (batch, int(full.shape[1]), out_h, out_w),
        lambda n, c, h, w: full[n, c, h, w],
        name="conv2d_winograd_crop",
    )


#: Measured bound on max|Winograd − direct| / max|direct| for fp32 with ResNet-like data (He
#: weights, unit-normal activations): the tile's transforms scale rounding by their coefficients.
_ERROR_BOUND = {2: 1e-5, 4: 1e-4}


def atol(tile: int) -> float:
    """Tolerance of F(tile×tile,3×3) against the direct conv, relative to max|output|."""
    return _ERROR_BOUND[tile]
