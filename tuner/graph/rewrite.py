"""One walk for every Relax rewrite of ours: a ``PyExprMutator`` over each Relax function."""

from __future__ import annotations

from tvm import relax
from tvm.ir import IRModule, Op
from tvm.ir.expr import GenericConst
from tvm.relax import Call, Expr
from tvm.relax.expr_functor import PyExprMutator


def is_op_call(expr: Expr | None, name: str) -> bool:
    """Whether ``expr`` is a call of the Relax operator ``name`` ("relax.divide")."""
    return isinstance(expr, Call) and isinstance(expr.op, Op) and str(expr.op.name) == name


#: The values an 8-bit quantized tensor holds, by its dtype.
INTEGER_RANGES = {"uint8": (0, 255), "int8": (-128, 127)}


def scalar_value(expr: Expr) -> float | None:
    """The value of a one-element constant (a scale, a zero point, an LRN parameter), or None."""
    if isinstance(expr, GenericConst) and expr.value.numpy().size == 1:
        return float(expr.value.numpy().reshape(()))
    return None


def static_shape(ty: object) -> tuple[int, ...] | None:
    """The static shape of a tensor type (``expr.ty``), None when unknown or symbolic."""
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    try:
        return tuple(int(d) for d in ty.shape.values)
    except (TypeError, AttributeError):
        return None


def rewrite_functions(rewriter: PyExprMutator, mod: IRModule) -> IRModule:
    """``mod`` with each Relax function replaced by ``rewriter``'s visit of it (``rewriter`` was
    built on ``mod``); TIR functions are kept as they are."""
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
    return rewriter.builder_.get()
