"""One walk for every Relax rewrite of ours: a ``PyExprMutator`` over each Relax function."""

from __future__ import annotations

from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator


def rewrite_functions(rewriter: PyExprMutator, mod: IRModule) -> IRModule:
    """``mod`` with each Relax function replaced by ``rewriter``'s visit of it (``rewriter`` was
    built on ``mod``); TIR functions are kept as they are."""
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
    return rewriter.builder_.get()
