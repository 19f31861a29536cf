"""MatMul and Gemm weights padded to whole vectors: ``x @ W[K, N]`` with ``N`` no multiple of the
vector width becomes ``(x @ [W | 0])[..., :N]``.

MetaSchedule tiles a loop only by the factors of its extent, so a column count such as PP-OCR's
18,385 classes (5 × 3,677) leaves no tile of 16 lanes to vectorize: the recogniser's 40×120 by
120×18,385 MatMul took 6.3 ms in the best of its trials against onnxruntime's 1.1 (28 GFLOP/s,
Xeon). With the constant weight padded once at build time by zero columns to 18,432 (= 16 ×
1,152, :func:`padded_columns`), every tile of a multiple of 16 is on the table; the slice
back to ``N`` columns is a copy of the output, fused after the product where FuseOps can. A
weight that is not a constant (attention's ``Q @ Kᵀ``) is left as it is: padding it would
cost a copy per call.

A product of more than ``PANEL_ROWS`` rows also gets its constant weight packed panel-major
(``schedules/ops/matmul.py``), one vector of columns contiguous over the whole reduction, and
is computed by that op's TE kernel instead of the frontend's ``matmul``.
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.ir import IRModule, Op
from tvm.ir.expr import GenericConst
from tvm.relax import Call, Expr
from tvm.relax.expr_functor import PyExprMutator, mutator

from convtune.schedules.ops.matmul import (
    PANEL_ROWS,
    pack_columns,
    packed_matmul,
    vector_width,
)

from .rewrite import rewrite_functions, static_shape

_MATMUL = Op.get("relax.matmul")


#: Column vectors the padded width is rounded to a multiple of, most first: with 12 (or 6) whole
#: vectors every register block of ``matmul_regblock.COLUMN_VECTORS`` but 5 divides the columns.
VECTOR_MULTIPLES = (12, 6)
#: The most zero columns a multiple of :data:`VECTOR_MULTIPLES` may add, as a fraction of the
#: columns (1/64: 1.6% more weights and FLOPs at most).
SPARE_FRACTION = 1 / 64


def padded_columns(columns: int, lanes: int) -> int:
    """``columns`` rounded up to whole vectors of ``lanes``, and further to a multiple of 12 or 6
    vectors where that adds at most :data:`SPARE_FRACTION` of the columns; unchanged when already
    whole or narrower than one vector (a head of 4 classes gains nothing from 12 zero columns).

    Whole vectors alone may leave a prime count of them: 18,710 classes (RapidOCR's v6
    recogniser) are 2,339 vectors of 8 lanes, so on AVX2 the register block of the class head
    could hold one column vector only, an 11th load for every 10 FMAs (best of the space 1.67
    ms); 2,340 vectors take 1, 2, 3, 4, 5 or 6 (1.18-1.25 ms at best; Zen 4 with AVX2 only,
    2026-12-06, warm, 2 threads)."""
    if columns <= lanes or columns % lanes == 0:
        return columns
    vectors = -(-columns // lanes)
    for multiple in VECTOR_MULTIPLES:
        padded = -(-vectors // multiple) * multiple * lanes
        if padded - columns <= columns * SPARE_FRACTION:
            return padded
    return vectors * lanes


@mutator
class _MatmulPadder(PyExprMutator):
    def __init__(self, mod: IRModule, lanes: int) -> None:
        super().__init__(mod)
        self.lanes = lanes
        self.padded = 0
        self.packed = 0

    def visit_call_(self, call: Call) -> Expr:
        call = super().visit_call_(call)
        if not call.op.same_as(_MATMUL) or not isinstance(call.args[1], GenericConst):
            return call
        weight = call.args[1].value.numpy()
        if weight.ndim != 2 or weight.dtype != np.float32:
            return call
        columns = weight.shape[1]
        padded = padded_columns(columns, self.lanes)
        # Whole columns: the weight itself (np.pad copies even when it adds nothing, and a
        # classifier's weight is hundreds of MB).
        wide = weight if padded == columns else np.pad(weight, ((0, 0), (0, padded - columns)))
        product = self._packed(call.args[0], wide, str(call.ty.dtype))
        if padded == columns:
            return call if product is None else product
        if product is None:
            product = relax.op.matmul(
                call.args[0], relax.const(wide, "float32"), out_dtype=call.attrs.out_dtype
            )
        self.padded += 1
        axis = len(call.ty.shape) - 1
        return relax.op.strided_slice(product, [axis], [0], [columns], assume_inbound=True)

    def _packed(self, data: Expr, weight: np.ndarray, out_dtype: str) -> Expr | None:
        """``data @ weight`` on the weight packed panel-major, if it has more than
        ``PANEL_ROWS`` rows of fp32 and whole vectors of columns; else None."""
        shape = static_shape(data.ty)
        width = vector_width(weight.shape[1], self.lanes)
        if (
            shape is None
            or len(shape) < 2
            or int(np.prod(shape[:-1])) <= PANEL_ROWS
            or width is None
            or str(data.ty.dtype) != "float32"
            or out_dtype != "float32"
        ):
            return None
        self.packed += 1
        packed = relax.const(pack_columns(weight, width), "float32")
        return self.builder_.call_te(packed_matmul, data, packed, primfunc_name_hint="matmul")


def pad_matmul_columns(mod: IRModule, lanes: int) -> tuple[IRModule, int]:
    """``mod`` (after constant folding) with each constant-weight fp32 MatMul padded to whole
    vectors of ``lanes`` columns and, above ``PANEL_ROWS`` rows, packed; and how many were
    padded."""
    padder = _MatmulPadder(mod, lanes)
    padded = rewrite_functions(padder, mod)
    return (padded, padder.padded) if padder.padded or padder.packed else (mod, 0)
