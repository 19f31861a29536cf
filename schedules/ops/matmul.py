"""A MatMul whose constant right operand is packed panel-major: ``B[K, N]`` held as
``B_packed[N / w, K, w]``, the ``w`` columns of one vector contiguous over all of ``K``.

The register block of ``matmul-regblock`` reads, for each ``k``, one vector of ``w`` columns
of each of its column vectors. From ``B[K, N]`` that is a read every ``N`` floats: PP-OCRv5's
class head (120 × 18432) touches a new 4 KB page for every ``k``, 120 pages a block, and the
prefetchers see a stride of 72 KB. Packed, each column vector is one contiguous run of
``K · w`` floats (7.5 KB) that the block streams in order. The packing is done once at build
time, on the constant (``tuner/graph/matmul_padding.py``), for products of more than
:data:`PANEL_ROWS` rows only: the column-panel and split-reduction designs of fewer rows read
whole rows of ``B`` and want them as they are.
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx

#: Rows of output (batch axes included) up to which a product keeps ``B[K, N]`` as it is: the
#: column-panel and split-reduction designs (``spaces/matmul_regblock.py``) read its rows whole.
PANEL_ROWS = 4
#: The TE block (and task) name of the packed product.
PACKED_MATMUL_BLOCK = "matmul_packed"


def vector_width(columns: int, lanes: int) -> int | None:
    """The vector (``lanes``, or half of it if that is still 8 lanes) whose whole number
    ``columns`` is, widest first; None if neither divides them."""
    return next((w for w in (lanes, lanes // 2) if w >= 8 and columns % w == 0), None)


def pack_columns(weight: np.ndarray, width: int) -> np.ndarray:
    """``weight[K, N]`` as ``[N / width, K, width]`` (``N`` a multiple of ``width``)."""
    depth, columns = weight.shape
    return np.ascontiguousarray(weight.reshape(depth, columns // width, width).transpose(1, 0, 2))


def packed_matmul(a: te.Tensor, packed: te.Tensor) -> te.Tensor:
    """``a[..., i, k] @ B[k, j]`` with ``B`` given packed (:func:`pack_columns`), in the
    operands' dtype."""
    *lead, depth = a.shape
    panels, _, width = packed.shape
    k = te.reduce_axis((0, depth), name="k")

    def element(*index: tirx.Var) -> tirx.PrimExpr:
        *rows, j = index
        return te.sum(a[(*rows, k)] * packed[j // width, k, j % width], axis=k)

    return te.compute((*lead, panels * width), element, name=PACKED_MATMUL_BLOCK)
