"""LRN as one kernel: the ONNX frontend's eight-op decomposition replaced by ``ops/lrn.py``'s.

TVM imports an ONNX ``LRN`` as ``x / (bias + α·avg_pool3d(expand_dims(x²))^… )^β`` in eight
Relax ops, which ran as five NCHW kernels with a layout transform before and after (a 3-D pool
has no blocked form): AlexNet's two LRNs took 3.0 of its 19.2 ms, ZFNet's 4.1 of 31.7, on an AMX
Xeon VM (2026-12-05). :func:`fuse_local_response_norms` puts one ``call_tir`` of the NCHW kernel
in their place, its PrimFunc marked with the LRN's parameters (:data:`LRN_ATTR`), and the
layout pass swaps it for the blocked kernel when its input is blocked
(:func:`blocked_lrn_call`), so the map stays ``NCHW{b}c`` through it.

Both kernels are opaque to FuseOps (:data:`OPAQUE`): each is its own task, which only the
``lrn`` space and the generic one schedule.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from functools import partial

from tvm import relax, tirx
from tvm.ir import IRModule
from tvm.relax import BlockBuilder, Call, Expr
from tvm.relax.expr_functor import PyExprMutator, mutator

from convtune.schedules.ops.lrn import LrnParams, lrn_blocked, lrn_nchw

from .rewrite import is_op_call, rewrite_functions, scalar_value

#: The PrimFunc attribute holding an LRN kernel's parameters (JSON of :class:`LrnParams`).
LRN_ATTR = "convtune.lrn"
#: TVM's op pattern kOpaque: FuseOps fuses nothing into or after the kernel.
OPAQUE = 8


#: The ops from the divide's denominator back to the square, each its predecessor's first operand.
_CHAIN = (
    "relax.power",
    "relax.add",
    "relax.multiply",
    "relax.squeeze",
    "relax.nn.avg_pool3d",
    "relax.expand_dims",
    "relax.multiply",
)


def match_lrn(bindings: dict[relax.Var, Expr], divide: Call) -> tuple[Expr, LrnParams] | None:
    """The input and parameters of the frontend's LRN ending in ``divide``, else None: ``x /
    power(add(multiply(squeeze(avg_pool3d(expand_dims(x·x, 1))), α), bias), β)`` with a
    (size, 1, 1) pool of stride 1 over channels that counts its padding."""
    x, denominator = divide.args
    chain: list[Call] = []
    expr = denominator
    for name in _CHAIN:
        value = bindings.get(expr) if isinstance(expr, relax.Var) else expr
        if not is_op_call(value, name):
            return None
        assert isinstance(value, Call)
        chain.append(value)
        expr = value.args[0]
    power, add, scale, _, pool, _, square = chain
    if not (square.args[0].same_as(x) and square.args[1].same_as(x)):
        return None
    if len(getattr(x.ty, "shape", ())) != 4 or str(x.ty.dtype) != "float32":
        return None
    beta, bias, alpha = (
        scalar_value(power.args[1]),
        scalar_value(add.args[1]),
        scalar_value(scale.args[1]),
    )
    if beta is None or bias is None or alpha is None:
        return None
    attrs = pool.attrs
    size, *rest = (int(k) for k in attrs.pool_size)
    padding = [int(p) for p in attrs.padding]
    if (
        rest != [1, 1]
        or [int(s) for s in attrs.strides] != [1, 1, 1]
        or [int(d) for d in attrs.dilation] != [1, 1, 1]
        or padding[1:3] + padding[4:] != [0, 0, 0, 0]
        or padding[0] + padding[3] != size - 1
        or not bool(attrs.count_include_pad)
        or str(attrs.layout) != "NCDHW"
    ):
        return None
    # The frontend averages, and scales the average by α: α/size · Σ, as ONNX defines it.
    return x, LrnParams(size, padding[0], alpha, beta, bias)


def _opaque_kernel(bb: BlockBuilder, call: Call, params: LrnParams) -> Call:
    """Mark the PrimFunc of ``call`` (a ``call_tir`` just made) opaque and with ``params``."""
    gvar = call.args[0]
    func = bb.get()[gvar].with_attr(LRN_ATTR, json.dumps(asdict(params)))
    bb.update_func(gvar, func.with_attr("op_pattern", OPAQUE))
    return call


@mutator
class _LrnFuser(PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)
        self.bindings: dict[relax.Var, Expr] = {}
        self.fused = 0

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        self.bindings[binding.var] = binding.value
        value = binding.value
        found = match_lrn(self.bindings, value) if is_op_call(value, "relax.divide") else None
        if found is None:
            super().visit_var_binding_(binding)
            return
        x, params = found
        call = self.builder_.call_te(
            partial(lrn_nchw, params=params),  # call_te passes TVM objects only
            self.visit_expr(x),
            primfunc_name_hint="local_response_norm",
        )
        self.fused += 1
        lrn = _opaque_kernel(self.builder_, call, params)
        self.set_var_remap(binding.var, self.builder_.emit(lrn, name_hint=binding.var.name))


def fuse_local_response_norms(mod: IRModule) -> tuple[IRModule, int]:
    """``mod`` with each of the frontend's LRN decompositions as one kernel, and their count.
    The ops before the divide are left to dead-code elimination."""
    fuser = _LrnFuser(mod)
    out = rewrite_functions(fuser, mod)
    if fuser.fused:
        out = relax.transform.DeadCodeElimination()(out)
    return out, fuser.fused


def lrn_params(func: object) -> LrnParams | None:
    """The parameters of an NCHW LRN kernel made by :func:`fuse_local_response_norms`."""
    if not isinstance(func, tirx.PrimFunc) or not func.attrs or LRN_ATTR not in func.attrs:
        return None
    return LrnParams(**json.loads(str(func.attrs[LRN_ATTR])))


def blocked_lrn_call(bb: BlockBuilder, blocked: Expr, channels: int, params: LrnParams) -> Call:
    """The ``call_tir`` of the blocked LRN kernel on ``blocked`` (``NCHW{b}c``)."""
    call = bb.call_te(
        partial(lrn_blocked, channels=channels, params=params),
        blocked,
        primfunc_name_hint="local_response_norm_blocked",
    )
    return _opaque_kernel(bb, call, params)


__all__ = [
    "LRN_ATTR",
    "blocked_lrn_call",
    "fuse_local_response_norms",
    "lrn_params",
    "match_lrn",
]
