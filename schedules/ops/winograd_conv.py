"""Winograd F(m×m, 3×3) in the blocked layout, the op: ``NCHW{a}c`` in, ``NCHW{b}c`` out.

Its blocks, each vectorized along a channel block:

- ``winograd_pad``: the input zero-padded to whole tiles;
- ``winograd_data_pack_rows`` then ``winograd_data_pack``: ``V[ε, ν, p, ci] = (Bᵀ d_p B)[ε, ν]``
  for every tile ``p`` and input channel, as two 1-D passes (rows, then columns) written term by
  term with the transform's nonzero coefficients only (``B`` of F(4×4) is half zeros); one sum
  per index is picked by a ``Select`` on a loop variable that the schedule unrolls, so the
  selects fold away at compile time, and the row pass is computed per tile, in registers;
- ``winograd_bgemm``: ``M[ε, ν, co, p] = Σ_ci V[ε, ν, p, ci] · U[ε, ν, co, ci]``, α² small
  GEMMs with ``co`` blocks as vector lanes and tiles as register rows;
  for bf16 data (``--precision bf16``) ``V`` is rounded to bf16 and the reduction runs over
  pairs of input channels, the shape of ``vdpbf16ps`` (``U`` packed ``(α, α, CO/16, CI/2, 16,
  2)``, :func:`pack_weight` with ``dot_group=2``), the transforms in fp32;
- ``winograd_inverse_cols`` then ``winograd_inverse``: ``Y = Aᵀ M A``, the same two passes per
  tile, written straight into the blocked output, cropped, so the model's elementwise epilogue
  (bias, residual, ReLU) fuses after it like after the direct conv.

``U`` is the weight transformed at build time (:func:`pack_weight`), so no weight transform runs
at inference. Its schedule space is ``schedules/spaces/winograd_nchwc.py``; the transform
matrices are ``winograd.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tvm import DataType, te, tirx, topi
from tvm.ir import IRModule
from tvm.s_tir import Schedule

from . import winograd
from .nchwc import block_names

PAD_BLOCK = "winograd_pad"
PACK_ROWS_BLOCK = "winograd_data_pack_rows"
PACK_BLOCK = "winograd_data_pack"
GEMM_BLOCK = "winograd_bgemm"
INVERSE_COLS_BLOCK = "winograd_inverse_cols"
INVERSE_BLOCK = "winograd_inverse"


def pack_weight(weight: np.ndarray, tile: int, out_block: int, dot_group: int = 0) -> np.ndarray:
    """OIHW 3×3 weights → ``(α, α, CO/b, CI, b)``: ``G·w·Gᵀ`` (float64, rounded once to the
    weight's type) with the output channels blocked by ``out_block`` for the GEMM's vector
    lanes; with a ``dot_group`` ``g`` (2 for bf16), ``(α, α, CO/b, CI/g, b, g)``: the ``g``
    input channels one lane of the dot product reduces side by side."""
    u = winograd.transform_weight(weight, tile)  # (α, α, CI, CO)
    alpha, _, ci, co = u.shape
    if dot_group:
        grouped = u.reshape(alpha, alpha, ci // dot_group, dot_group, co // out_block, out_block)
        return np.ascontiguousarray(grouped.transpose(0, 1, 4, 2, 5, 3))
    blocked = u.reshape(alpha, alpha, ci, co // out_block, out_block).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(blocked)


def _terms(matrix: np.ndarray, column: int) -> list[tuple[int, float]]:
    return [(row, float(c)) for row, c in enumerate(matrix[:, column]) if c != 0.0]


def _transform(index: tirx.PrimExpr, matrix: np.ndarray, read: Callable[[int], Any]) -> Any:
    """``Σ_r matrix[r, index] · read(r)`` over the nonzero coefficients, for a loop variable
    ``index``: a select chain over its values that folds to one sum once the loop is unrolled."""
    expr = None
    for column in reversed(range(matrix.shape[1])):
        total = None
        for row, coefficient in _terms(matrix, column):
            term = read(row) * tirx.const(coefficient, "float32")
            total = term if total is None else total + term
        expr = total if expr is None else tirx.Select(index == column, total, expr)
    return expr


def conv2d_winograd_nchwc(
    data: te.Tensor, packed: te.Tensor, padding: Any, tile: int, out_dtype: str
) -> te.Tensor:
    """TE compute: ``data`` (N, CI/a, H, W, a), ``packed`` from :func:`pack_weight`, output
    (N, CO/b, OH, OW, b); a 3×3 stride-1 convolution with ``padding`` (top, left, bottom, right).
    A 6-D ``packed`` (bf16, ``dot_group=2``) makes the GEMM a dot product over channel pairs of
    bf16 ``V`` (see the module docstring).

    Both transforms are separable and run as two 1-D passes (rows, then columns): each output
    is a sum of at most α terms, where the 2-D form summed up to α² with every (ε, ν) choice
    in one expression. That expression made F(4×4) candidates compile in 6-15 s (10 s of a
    17 s compile in TIR's common-subexpression pass alone), against 0.2-0.5 s for F(2×2)."""
    top, left, bottom, right = (int(p) for p in padding)
    batch, ci_chunks, height, width, ci_block = (int(d) for d in data.shape)
    alpha, _, co_chunks, groups, co_block, *dot = (int(d) for d in packed.shape)
    group = dot[0] if dot else 1
    channels = groups * group
    assert alpha == tile + 2 and channels == ci_chunks * ci_block and ci_block % group == 0
    out_h, out_w = height + top + bottom - 2, width + left + right - 2
    tiles_h, tiles_w = -(-out_h // tile), -(-out_w // tile)
    tiles = batch * tiles_h * tiles_w
    a_mat, b_mat, _ = (m.astype(np.float64) for m in winograd.transform_matrices(tile))
    padded = topi.nn.pad(
        data,
        [0, 0, top, left, 0],
        [0, 0, tiles_h * tile + 2 - height - top, tiles_w * tile + 2 - width - left, 0],
        name=PAD_BLOCK,
    )

    # The transforms add and scale in fp32: bf16 data is widened as it is read and ``V`` rounded
    # to bf16 as it is stored (for fp32 data ``astype`` returns the value itself: no cast).
    def pack_rows(eps: Any, col: Any, p: Any, c: Any, ci: Any) -> Any:
        n, y, x = p // (tiles_h * tiles_w), p // tiles_w % tiles_h, p % tiles_w
        return _transform(
            eps,
            b_mat,
            lambda row: padded[n, c, y * tile + row, x * tile + col, ci].astype("float32"),
        )

    rows = te.compute((alpha, alpha, tiles, ci_chunks, ci_block), pack_rows, name=PACK_ROWS_BLOCK)
    packed_data = te.compute(
        (alpha, alpha, tiles, ci_chunks, ci_block),
        lambda eps, nu, p, c, ci: _transform(
            nu, b_mat, lambda col: rows[eps, col, p, c, ci]
        ).astype(str(data.dtype)),
        name=PACK_BLOCK,
    )
    if dot:
        gemm = _dot_gemm(packed_data, packed, out_dtype)
    else:
        rc = te.reduce_axis((0, channels), name="rc")
        gemm = te.compute(
            (alpha, alpha, co_chunks, tiles, co_block),
            lambda eps, nu, co, p, cb: te.sum(
                packed_data[eps, nu, p, rc // ci_block, rc % ci_block].astype(out_dtype)
                * packed[eps, nu, co, rc, cb].astype(out_dtype),
                axis=rc,
            ),
            name=GEMM_BLOCK,
        )
    # Columns first: ``inverse_cols[ε, vw, co, p]`` = Σ_ν M[ε, ν] A[ν, vw], then the rows.
    cols = te.compute(
        (alpha, tile, co_chunks, tiles, co_block),
        lambda eps, vw, co, p, cb: _transform(vw, a_mat, lambda nu: gemm[eps, nu, co, p, cb]),
        name=INVERSE_COLS_BLOCK,
    )

    def inverse(n: Any, co: Any, h: Any, w: Any, cb: Any) -> Any:
        p = (n * tiles_h + h // tile) * tiles_w + w // tile
        return _transform(h % tile, a_mat, lambda eps: cols[eps, w % tile, co, p, cb])

    return te.compute((batch, co_chunks, out_h, out_w, co_block), inverse, name=INVERSE_BLOCK)


def _dot_gemm(packed_data: te.Tensor, packed: te.Tensor, out_dtype: str) -> te.Tensor:
    """The GEMM over groups of input channels: its two innermost axes (output lane, channel in
    the group) are the dot-product intrinsic's (``bf16_dot.py``)."""
    alpha, _, tiles, _, ci_block = (int(d) for d in packed_data.shape)
    _, _, co_chunks, groups, co_block, group = (int(d) for d in packed.shape)
    per_block = ci_block // group
    rc = te.reduce_axis((0, groups), name="rc")
    lane = te.reduce_axis((0, group), name="rc_lane")
    return te.compute(
        (alpha, alpha, co_chunks, tiles, co_block),
        lambda eps, nu, co, p, cb: te.sum(
            packed_data[eps, nu, p, rc // per_block, rc % per_block * group + lane].astype(
                out_dtype
            )
            * packed[eps, nu, co, rc, cb, lane].astype(out_dtype),
            axis=[rc, lane],
        ),
        name=GEMM_BLOCK,
    )


def is_winograd_nchwc(mod: IRModule) -> bool:
    """Whether the task holds the blocked Winograd blocks above."""
    return GEMM_BLOCK in block_names(Schedule(mod))


def winograd_tile(mod: IRModule) -> int:
    """The output tile m of the task's F(m×m, 3×3) (its GEMM runs over α = m + 2 squared); 0
    for a task that is no Winograd kernel."""
    sch = Schedule(mod)
    if GEMM_BLOCK not in block_names(sch):
        return 0
    return tile_of(sch, sch.get_sblock(GEMM_BLOCK))


def weight_itemsize(mod: IRModule) -> int:
    """Bytes of one element of the transformed weights a Winograd task's GEMM reads (4 for
    fp32, 2 for bf16)."""
    sch = Schedule(mod)
    return int(DataType(str(sch.get(sch.get_sblock(GEMM_BLOCK)).reads[-1].source.dtype)).bits) // 8


def tile_of(sch: Schedule, gemm: Any) -> int:
    """The output tile m of the Winograd GEMM block ``gemm`` of ``sch``."""
    return int(sch.get(gemm).reads[0].source.shape[0]) - 2
