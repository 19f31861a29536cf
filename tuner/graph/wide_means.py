"""Large fp32 means accumulated in fp64.

A mean over a feature map (``GlobalAveragePool``, ``ReduceMean`` over H and W: the squeeze of a
squeeze-excitation block) is one sum of tens of thousands of values. TVM's reduction adds them in
order, in fp32, so each addition rounds at the running sum's magnitude: over n terms the mean is
off by up to ~n·2⁻²⁴ relative, 4.8e-6 typical at 160×160 (numpy, sequential fp32 against fp64),
where onnxruntime's blocked sums stay near one rounding. A squeeze-excitation block multiplies the
whole feature map by a function of that mean, so the error reaches every later element: PP-OCRv6
tiny det (13 such blocks, the first over 160×160) came out 5.4e-4 from onnxruntime on its [0, 1]
map, 811 elements over the verification tolerance (2026-12-04, Zen 4), in the tuned build and the
unscheduled one alike; with its means in fp64, 6.6e-5 and none.

The sum is memory-bound (each element is read once), so the wider accumulator costs a convert
and half-width adds that the loads hide. Means over fewer than :data:`MIN_ELEMENTS` elements stay
fp32: their sequential error is below the verification's 1e-4.
"""

from __future__ import annotations

import math

from tvm import relax
from tvm.ir import IRModule, Op
from tvm.relax import Call, Expr
from tvm.relax.expr_functor import PyExprMutator, mutator

from .rewrite import rewrite_functions

#: Elements per output below which a mean stays fp32: n·2⁻²⁴ < 1e-5 relative.
MIN_ELEMENTS = 256

_MEAN = Op.get("relax.mean")


def reduced_elements(call: Call) -> int | None:
    """How many input elements each output of the mean ``call`` sums (None: not static)."""
    shape = call.args[0].ty.shape
    if shape is None:
        return None
    axes = call.attrs.axis
    dims = [shape[int(a)] for a in axes] if axes is not None else list(shape)
    try:
        return math.prod(int(d) for d in dims)
    except TypeError:  # a symbolic dim
        return None


@mutator
class _WideMeans(PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)
        self.widened = 0

    def visit_call_(self, call: Call) -> Expr:
        call = super().visit_call_(call)
        if not (isinstance(call, Call) and call.op.same_as(_MEAN)):
            return call
        data = call.args[0]
        if str(data.ty.dtype) != "float32":
            return call
        elements = reduced_elements(call)
        if elements is None or elements < MIN_ELEMENTS:
            return call
        self.widened += 1
        wide = relax.op.mean(relax.op.astype(data, "float64"), call.attrs.axis, call.attrs.keepdims)
        return relax.op.astype(wide, "float32")


def wide_means(mod: IRModule) -> tuple[IRModule, int]:
    """``mod`` with each fp32 mean over at least :data:`MIN_ELEMENTS` elements computed in fp64
    (cast in, mean, cast out: one fused kernel), and how many were (``mod`` itself when none)."""
    widener = _WideMeans(mod)
    widened = rewrite_functions(widener, mod)
    return (widened, widener.widened) if widener.widened else (mod, 0)
