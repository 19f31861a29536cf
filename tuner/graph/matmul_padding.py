"""MatMul and Gemm weights padded to whole vectors: ``x @ W[K, N]`` with ``N`` no multiple of the
vector width becomes ``(x @ [W | 0])[..., :N]``.

MetaSchedule tiles a loop only by the factors of its extent, so a column count such as PP-OCR's
18,385 classes (5 × 3,677) leaves no tile of 16 lanes to vectorize: the recogniser's 40×120 by
120×18,385 MatMul took 6.3 ms in the best of its trials against onnxruntime's 1.1 (28 GFLOP/s,
Xeon). With the constant weight padded once at build time by zero columns to 18,400 (= 16 ×
1,150), every tile of a multiple of 16 is on the table; the slice back to ``N`` columns is a
copy of the output, fused after the product where FuseOps can. A weight that is not a constant
(attention's ``Q @ Kᵀ``) is left as it is: padding it would cost a copy per call.
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.ir import IRModule, Op
from tvm.ir.expr import GenericConst
from tvm.relax import Call, Expr
from tvm.relax.expr_functor import PyExprMutator, mutator

from .rewrite import rewrite_functions

_MATMUL = Op.get("relax.matmul")


def padded_columns(columns: int, lanes: int) -> int:
    """``columns`` rounded up to whole vectors of ``lanes``; unchanged when already whole or
    narrower than one vector (a head of 4 classes gains nothing from 12 zero columns)."""
    if columns <= lanes or columns % lanes == 0:
        return columns
    return -(-columns // lanes) * lanes


@mutator
class _MatmulPadder(PyExprMutator):
    def __init__(self, mod: IRModule, lanes: int) -> None:
        super().__init__(mod)
        self.lanes = lanes
        self.padded = 0

    def visit_call_(self, call: Call) -> Expr:
        call = super().visit_call_(call)
        if not call.op.same_as(_MATMUL) or not isinstance(call.args[1], GenericConst):
            return call
        weight = call.args[1].value.numpy()
        if weight.ndim != 2 or weight.dtype != np.float32:
            return call
        columns = weight.shape[1]
        padded = padded_columns(columns, self.lanes)
        if padded == columns:
            return call
        self.padded += 1
        wide = np.pad(weight, ((0, 0), (0, padded - columns)))
        product = relax.op.matmul(
            call.args[0], relax.const(wide, "float32"), out_dtype=call.attrs.out_dtype
        )
        axis = len(call.ty.shape) - 1
        return relax.op.strided_slice(product, [axis], [0], [columns], assume_inbound=True)


def pad_matmul_columns(mod: IRModule, lanes: int) -> tuple[IRModule, int]:
    """``mod`` (after constant folding) with each constant-weight fp32 MatMul padded to whole
    vectors of ``lanes`` columns, and how many were."""
    padder = _MatmulPadder(mod, lanes)
    padded = rewrite_functions(padder, mod)
    return (padded, padder.padded) if padder.padded else (mod, 0)
