"""A quantize read only by its own dequantize, as float arithmetic: ``round``, ``clip``, scale.

A QDQ model rounds a conv's output to 8 bits before a residual Add (ResNet-50 QDQ:
``conv → quantize → dequantize → add → quantize``), and both ops fuse into the conv's
epilogue, where the integer round trip costs four vector instructions per sixteen outputs
that compute nothing: add the zero point, convert to integers, subtract the zero point,
convert back. With ``round(x / s)`` a float holding an integer, and the zero point ``z`` an
integer,

    dequantize(quantize(x)) = s · (clamp(round(x · 1/s) + z, lo, hi) − z)
                            = s · clamp(round(x · 1/s), lo − z, hi − z)

exactly, in float32 (every value is an integer well inside float32's 24-bit mantissa), so the
result is bit for bit the one before. Zen 5 VM, 2026-12-07: ResNet-50 QDQ's 64→256 1×1 convs
at 56² with their residual add spent 22 instructions per sixteen outputs on the epilogue
against 16 ``vpdpbusd``; the pair's four are gone.

Only pairs with one-element parameters, equal on both sides, and a quantize nothing else reads
(a quantize that feeds a conv must still write its 8-bit tensor). The parameters stay
one-element tensors, kernel arguments: two convs whose scales differ stay one task
(``quantized.singleton_qparams``).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule, Op
from tvm.relax import Call, Expr
from tvm.relax.expr_functor import PyExprMutator, mutator

from .rewrite import INTEGER_RANGES, rewrite_functions, scalar_value

_QUANTIZE = Op.get("relax.quantize")
_DEQUANTIZE = Op.get("relax.dequantize")


def _f32(value: float) -> relax.Constant:
    return relax.const(np.array([value], dtype=np.float32))


@mutator
class _FakeQuantizeMutator(PyExprMutator):
    def __init__(self, mod: IRModule, pairs: dict[relax.Var, Call]) -> None:
        super().__init__(mod)
        #: Each quantize that one dequantize alone reads, by its variable.
        self.pairs = pairs
        self.rewritten = 0

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        quantize = (
            self.pairs.get(value.args[0])
            if isinstance(value, Call) and value.op.same_as(_DEQUANTIZE)
            else None
        )
        new = self._as_float(quantize, value) if quantize is not None else None
        if new is None:
            super().visit_var_binding_(binding)
            return
        # A model's output (ResNet-50 QDQ ends in quantize → dequantize) stays one.
        emit = (
            self.builder_.emit
            if isinstance(binding.var, relax.DataflowVar)
            else self.builder_.emit_output
        )
        self.set_var_remap(binding.var, emit(new, name_hint=binding.var.name))
        self.rewritten += 1

    def _as_float(self, quantize: Call, dequantize: Call) -> Expr | None:
        data = quantize.args[0]
        params = [scalar_value(arg) for arg in (*quantize.args[1:], *dequantize.args[1:])]
        scale, zero, scale_back, zero_back = params
        integer = INTEGER_RANGES.get(str(quantize.attrs.out_dtype))
        if (
            scale is None
            or zero is None
            or (scale, zero) != (scale_back, zero_back)
            or integer is None
            or str(data.ty.dtype) != "float32"
            or str(dequantize.attrs.out_dtype) != "float32"
        ):
            return None
        # 1/s in float32, as the quantize's legalization computes it (reciprocal_quantize.py).
        inverse = float(np.float32(1.0) / np.float32(scale))
        low, high = (float(bound - int(zero)) for bound in integer)
        steps = relax.op.round(relax.op.multiply(self.visit_expr(data), _f32(inverse)))
        clamped = relax.op.minimum(relax.op.maximum(steps, _f32(low)), _f32(high))
        return relax.op.multiply(clamped, quantize.args[1])


def _single_reader_quantizes(mod: IRModule) -> dict[relax.Var, Call]:
    """The quantizes bound to a dataflow variable that one binding alone reads, by variable."""
    found: dict[relax.Var, Call] = {}
    for func in mod.functions.values():
        if not isinstance(func, relax.Function):
            continue
        for block in func.body.blocks:
            if not isinstance(block, relax.DataflowBlock):
                continue
            uses = relax.analysis.udchain(block)
            for binding in block.bindings:
                value = binding.value
                if (
                    isinstance(binding.var, relax.DataflowVar)
                    and isinstance(value, Call)
                    and value.op.same_as(_QUANTIZE)
                    and len(uses.get(binding.var, [])) == 1
                ):
                    found[binding.var] = value
    return found


def fake_quantize_pairs(mod: IRModule) -> tuple[IRModule, int]:
    """``mod`` with each quantize → dequantize pair of one reader as float arithmetic (above),
    and how many pairs it rewrote."""
    pairs = _single_reader_quantizes(mod)
    if not pairs:
        return mod, 0
    mutator_ = _FakeQuantizeMutator(mod, pairs)
    out = rewrite_functions(mutator_, mod)
    for gvar, func in out.functions.items():
        if isinstance(func, relax.Function):  # the quantizes read by nobody now
            out[gvar] = relax.analysis.remove_all_unused(func)
    return out, mutator_.rewritten


@tvm.transform.module_pass(opt_level=0, name="FakeQuantizePairs")
def fake_quantize_pass(mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
    """The pass form of :func:`fake_quantize_pairs` (``extract.fusion_passes``)."""
    return fake_quantize_pairs(mod)[0]


__all__ = ["fake_quantize_pairs", "fake_quantize_pass"]
