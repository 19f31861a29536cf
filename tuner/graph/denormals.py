"""Denormal weights flushed to zero.

Intel cores take a microcode assist, on the order of a hundred cycles, for each vector FMA with
a denormal operand (|w| < 2⁻¹²⁶ ≈ 1.18e-38) unless the thread runs with MXCSR's DAZ bit; Zen
cores do not. Trained weights decay into that range, and Paddle's exports keep them: PP-OCRv5 det
holds 14,879 (5,812 in one 192→384 1×1 conv at 10×10). On a Sapphire-Rapids-class Xeon that
15-MFLOP conv took 8.39 ms in our build and 7.69 in onnxruntime's (0.05 ms is its FLOP count at
our kernels' speed), the model 2.03× OpenVINO's time end to end; on Zen 4 the same conv was never
among the slow layers.

Setting them to zero moves each weight by less than 1.18e-38, so each product it takes part in by
less than 1.18e-38·|x|: below the fp32 rounding of any output that is not itself denormal. It is
done once, on the constants of the model that is compiled (after BatchNorm folding, which can
scale weights into or out of the range, and after the layout pass's packing and Winograd
transforms), so the kernels never see a denormal weight, whatever thread runs them.
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.ir import IRModule
from tvm.ir.expr import GenericConst
from tvm.relax import Expr
from tvm.relax.expr_functor import PyExprMutator, mutator

from .rewrite import rewrite_functions

#: Floating-point dtypes whose denormals are flushed. bf16 weights (``--precision bf16``) are
#: left alone: ``vdpbf16ps`` treats denormal inputs as zero whatever MXCSR says.
_FLOATS = frozenset({"float32", "float64"})


def flush_denormals(values: np.ndarray) -> tuple[np.ndarray, int]:
    """``values`` with every denormal set to +0.0, and how many there were (``values`` itself
    when there were none)."""
    tiny = np.finfo(values.dtype).tiny
    denormal = (values != 0) & (np.abs(values) < tiny)
    count = int(np.count_nonzero(denormal))
    if not count:
        return values, 0
    return np.where(denormal, values.dtype.type(0), values), count


@mutator
class _DenormalFlusher(PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)
        self.flushed = 0

    def visit_generic_const_(self, const: GenericConst) -> Expr:
        if str(const.ty.dtype) not in _FLOATS:
            return const
        values, count = flush_denormals(const.value.numpy())
        if not count:
            return const
        self.flushed += count
        return relax.const(values, str(const.ty.dtype))


def flush_denormal_constants(mod: IRModule) -> tuple[IRModule, int]:
    """``mod`` with the denormals of its floating-point constants flushed to zero, and how many
    values changed (``mod`` itself when none did)."""
    flusher = _DenormalFlusher(mod)
    flushed = rewrite_functions(flusher, mod)
    return (flushed, flusher.flushed) if flusher.flushed else (mod, 0)
