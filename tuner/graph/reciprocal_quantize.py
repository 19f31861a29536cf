"""QuantizeLinear lowered with a multiplication by the reciprocal of its scale, not a division.

TVM lowers ``relax.quantize`` to ``round(x / scale) + zero_point``, clamped. A division of zmm
registers (``vdivps``) issues once per ~10 cycles where a multiplication issues twice a cycle,
and a QDQ model quantizes every conv output once or twice (the conv's requantization, then the
residual add's): with the divisions, ResNet-50 QDQ's 128→512 1×1 convs at 28² (401,408 outputs,
two quantizes each) took 0.19 ms on AMX tiles whose products took about 0.04. The reciprocal of
a scalar scale is loop-invariant, so LLVM computes it once per kernel.

``x · (1/s)`` can differ from ``x / s`` in the last bit, so a value exactly halfway between two
steps may round the other way: one quantization step, which the verification's tolerance in
steps allows (onnxruntime's own QLinearConv requantizes with a float multiplier too).
"""

from __future__ import annotations

from typing import Any

from tvm import te, tirx
from tvm.ir import Call
from tvm.relax import BlockBuilder, Expr
from tvm.relax.transform.legalize_ops.common import _try_convert_to_scalar_const

_SCALAR = (tirx.IntImm, tirx.FloatImm)


def _at(param: Any, axis: int, indices: tuple[Any, ...]) -> Any:
    """A quantization parameter's value at ``indices``: a literal, a one-element tensor, or one
    value per index along ``axis``."""
    if isinstance(param, _SCALAR):
        return param
    if all(isinstance(d, tirx.IntImm) and int(d) == 1 for d in param.shape):
        return param[(0,) * len(param.shape)]
    return param[indices[axis]]


def legalize_quantize(bb: BlockBuilder, call: Call) -> Expr:
    """``relax.quantize`` as ``clamp(round(x · (1/scale)) + zero_point)`` (TVM's otherwise)."""
    axis = int(call.attrs.axis)
    out_dtype = str(call.attrs.out_dtype)

    def compute(data: te.Tensor, scale: Any, zero: Any) -> te.Tensor:
        axis_ = axis if axis >= 0 else axis + len(data.shape)

        def value(*indices: Any) -> Any:
            scaled = data[indices] * (tirx.const(1.0, data.dtype) / _at(scale, axis_, indices))
            rounded = te.round(scaled) if "int" in out_dtype else scaled
            shifted = rounded + _at(zero, axis_, indices).astype(data.dtype)
            low, high = tirx.min_value(out_dtype), tirx.max_value(out_dtype)
            return te.max(te.min(shifted, high), low).astype(out_dtype)

        return te.compute(data.shape, value, name="quantized")

    return bb.call_te(
        compute,
        call.args[0],
        _try_convert_to_scalar_const(call.args[1]),
        _try_convert_to_scalar_const(call.args[2]),
        primfunc_name_hint="quantize",
    )


__all__ = ["legalize_quantize"]
