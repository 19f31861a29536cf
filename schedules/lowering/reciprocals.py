"""Divisions the kernels need not run: by a constant, a multiplication by its reciprocal; erf's
and sigmoid's, on AVX-512, a reciprocal estimate refined by one Newton step.

A zmm division (``vdivps``) issues once per 16 cycles on the AVX-512 Xeons we ran (Ice Lake,
Sapphire/Emerald Rapids) where FMAs issue twice a cycle. PP-OCRv6's recognisers end most 1×1
convs in an Erf-GELU, ``x·(1 + erf(x / √2))/2``, which TVM compiles to two divisions per output:
the ``/ √2`` (TVM keeps ``x / c`` a division, since ``x · (1/c)`` can differ in the last bit) and
the one in erf's rational function (``fast_math.fast_erf``). On an AMX Xeon VM (2026-12-07, a
cold 8-minute tune) the 192→384 1×1 conv at 6×80 with that epilogue ran at 228 GFLOP/s, the
384→192 one without it at 294, and six of them made the recogniser's largest gap to
onnxruntime (1.887 against 1.500 ms). SiLU's sigmoid, ``1 / (1 + e^-x)``, divides too.

Here, after TVM's TIR pipeline (vectorized, before ``LowerIntrin`` expands the intrinsics):

- ``x / c`` for a float32 constant ``c`` is ``x · (1/c)``, on every target (within an ulp);
  so is a vector divided by one scalar (Softmax's ``e^x / Σ``, 16 outputs per division), whose
  reciprocal is one scalar division per vector (``1/0`` and ``1/∞`` give the quotients'
  infinities, NaNs and zeros);
- on AVX-512 targets, erf and sigmoid of a float32 vector of 16 lanes (8 and 4 with AVX512-VL)
  are expanded here, their division a multiplication by ``vrcp14ps``'s estimate (relative error
  2⁻¹⁴) refined by one Newton step ``r·(2 - q·r)`` (2⁻²⁸, below fp32's rounding): three
  instructions in place of one that blocks the divider for 16 cycles. Their divisors are
  bounded away from zero and infinity (erf's ``Q(x²)`` on its clamped range; sigmoid's
  ``1 + e^-x``, where ``fast_exp`` clamps ``e^-x`` below 2.4e38, whose estimate is 0 and
  refines to 0), so the step never meets the 0·∞ it would turn into a NaN. Other divisions keep
  ``vdivps``: a user's divisor may be 0 or infinite.

Measured on that Xeon, each GELU 1×1 conv's best record alone before → after (erf also made
vectorizable, ``fast_math.py``): 192→384 at 6×80 0.260 → 0.234 ms, 96→192 at 12×80 0.141 →
0.112, 384→768 at 3×80 0.467 → 0.425; the recogniser rebuilt from the same records, paired,
0.968× its time.

A lowering, not a rewrite of the workload: task keys and stored records are unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import DataType, ir, tirx
from tvm.target import Target

from ..ops.isa import has_avx512, has_feature
from .fast_math import constant_value, fast_erf, is_float32, like

#: ``vrcp14ps`` by vector width (lanes), with the AVX-512 feature each width needs.
_RCP14 = {
    16: ("llvm.x86.avx512.rcp14.ps.512", "avx512f"),
    8: ("llvm.x86.avx512.rcp14.ps.256", "avx512vl"),
    4: ("llvm.x86.avx512.rcp14.ps.128", "avx512vl"),
}


def multiply_by_reciprocal(div: tirx.Div) -> tirx.PrimExpr:
    """``a / c`` as ``a · (1/c)`` where ``c`` is a finite, nonzero float32 constant, and a
    vector ``a / broadcast(s)`` as ``a · broadcast(1/s)``: one scalar division per vector."""
    if not is_float32(div):
        return div
    c = constant_value(div.b)
    if c is not None:
        if c == 0.0 or not np.isfinite(c):
            return div
        return div.a * like(div, float(np.float32(1.0) / np.float32(c)))
    if isinstance(div.b, tirx.Broadcast):
        lanes = int(div.b.lanes)
        return div.a * tirx.Broadcast(tirx.FloatImm("float32", 1.0) / div.b.value, lanes)
    return div


def estimate_reciprocal(q: tirx.PrimExpr, intrinsic: str) -> tirx.PrimExpr:
    """``1/q`` as ``vrcp14ps`` refined by one Newton step; ``q`` must be positive and finite."""
    dtype = str(q.ty.dtype)
    mask = tirx.IntImm("int16" if DataType(dtype).lanes == 16 else "int8", -1)
    q_var = tirx.Var("rcp_q", dtype)
    r_var = tirx.Var("rcp_r", dtype)
    estimate = tirx.call_llvm_pure_intrin(dtype, intrinsic, q_var, q_var, mask)
    return tirx.Let(q_var, q, tirx.Let(r_var, estimate, r_var * (like(q, 2.0) - q_var * r_var)))


def _reciprocal_for(target: Target | None, lanes: int) -> str | None:
    """The ``vrcp14ps`` intrinsic for a vector of ``lanes`` float32 on ``target``, if any."""
    if target is None or lanes not in _RCP14 or not has_avx512(target):
        return None
    intrinsic, feature = _RCP14[lanes]
    return intrinsic if has_feature(target, feature) else None


def lower_divisions(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with the divisions of the module docstring rewritten."""
    target = func.attrs.get("target") if func.attrs is not None else None
    supported: dict[int, str | None] = {}  # by lanes: a feature check builds a Target

    def on_call(call: ir.Call) -> tirx.PrimExpr:
        name = getattr(call.op, "name", "")
        if name not in ("tirx.erf", "tirx.sigmoid"):
            return call
        (x,) = call.args
        if not is_float32(x):
            return call
        lanes = int(DataType(str(x.ty.dtype)).lanes)
        if lanes not in supported:
            supported[lanes] = _reciprocal_for(target, lanes)
        intrinsic = supported[lanes]
        if intrinsic is None:
            return call

        def inverse(q: tirx.PrimExpr) -> tirx.PrimExpr:
            return estimate_reciprocal(q, intrinsic)

        if name == "tirx.erf":
            return fast_erf(x, inverse)
        return inverse(like(x, 1.0) + tirx.exp(like(x, 0.0) - x))

    body = tvm_ffi.structural_map(
        func.body, [(tirx.Div, multiply_by_reciprocal), (ir.Call, on_call)]
    )
    return func if body.same_as(func.body) else func.with_body(body)


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="convtune.LowerDivisions")
def LowerDivisions(func: tirx.PrimFunc, mod: Any, ctx: Any) -> tirx.PrimFunc:
    """The pass form of :func:`lower_divisions`."""
    return lower_divisions(func)


__all__ = ["LowerDivisions", "estimate_reciprocal", "lower_divisions", "multiply_by_reciprocal"]
