"""A vectorizable exp and erf: how ``tirx.exp`` and ``tirx.erf`` on fp32 compile for LLVM CPUs.

TVM lowers ``tirx.exp`` to LLVM's ``llvm.exp`` intrinsic, and LLVM has no vector expansion of it
without a vector math library: a vectorized ``sigmoid(x)·x`` loop compiles to one scalar
``expf@PLT`` call per element. Measured on Zen 3 after a 30-minute EfficientNet-B0 search, every
conv with a SiLU epilogue was slow for that reason alone (the 112×112 expand ran at 11 GFLOP/s,
3.72 ms against onnxruntime's 0.57 ms; the depthwise convs with SiLU at 4–16 GFLOP/s), while the
projections without SiLU beat onnxruntime. On Zen 4 a vectorized loop of this exp takes 0.26 ns
per element against 2.1 ns for libm's.

Here fp32 exp is lowered to plain arithmetic instead: Cody–Waite range reduction
``x = n·ln2 + r``, Cephes' degree-5 polynomial for ``e^r`` on ``|r| ≤ ln2/2``, and ``2^n``
written into the exponent bits. Each step is one vector instruction (AVX-512: ``vrndscaleps``,
FMAs, ``vpslld``), so an epilogue vectorizes with its conv. Sigmoid, SiLU and tanh reach exp
through TVM's own lowering rules, so they use it too. It is a lowering rule, not a rewrite of
the workload: task keys and stored records are unchanged.

Accuracy: within 2 ulp of the exact exp on the range below (``tests/schedules/
test_fast_math.py`` measures it against float64 and the models against onnxruntime, whose MLAS
kernels approximate too). Inputs are clamped to ``[EXP_LOW, EXP_HIGH]``: below, ``e^x`` would
be a denormal (we return ~1e-38); above, ``2^n`` would leave the exponent field (we return
~2.4e38 where ``expf`` reaches inf).

erf has the same problem: TVM lowers ``tirx.erf`` to a scalar ``erff@PLT`` call per element.
PP-OCRv6's convs end in an Erf-GELU; on a Sapphire-Rapids-class Xeon the 48→96 1×1 conv at 80²
with that epilogue took 8.31 ms against onnxruntime's 0.52 (13.5 ns per output element), the
model 2.59× OpenVINO's time. fp32 erf is lowered here to the odd/even rational function on
``[-4, 4]`` that Eigen and TVM's ``topi.fast_erf`` use (outside, erf is ±1 in fp32): ten FMAs,
a division and a clamp to [-1, 1]. Max absolute error 4.2e-7 against float64 over [-6, 6].

pow, the same again: ``tirx.pow`` became one ``powf@PLT`` call per element. AlexNet, ZFNet and
GoogLeNet normalize with LRN, ``x / (1 + α/n·Σx²)^0.75``; untuned, AlexNet's two LRN powers took
2.3 ms (4.6 ns per element, Zen 4, beside a test run). fp32 pow by a constant exponent (LRN's β,
ONNX Pow by an initializer) is lowered here to vector code: small integer exponents by
multiplication, ±½ by a square root, any other as ``exp(y·log x)`` with Cephes' log polynomial,
and ``powf``'s values at zero and for negative x. Within 26.5 ulp of float64 for x in
[1e-6, 1e6] and y = 2.5 (y·log x rounds in fp32 at its magnitude), 7.5 ulp for LRN's 0.75.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import tvm
from tvm import DataType, tirx

# Cephes expf: the polynomial for (e^r - 1 - r) / r², highest degree first.
_POLYNOMIAL = (
    1.9875691500e-4,
    1.3981999507e-3,
    8.3334519073e-3,
    4.1665795894e-2,
    1.6666665459e-1,
    5.0000001201e-1,
)
_LOG2E = 1.44269504088896341
# ln 2 split so that n·_LN2_HIGH is exact in fp32 for |n| < 2^9 (Cody–Waite).
_LN2_HIGH = 0.693359375
_LN2_LOW = -2.12194440e-4
# n = round(x·log2 e) stays in [-126, 127] on this range, so 2^n is a normal fp32 number.
EXP_LOW = -87.33654
EXP_HIGH = 88.37626

#: Above TVM's own rule for exp on LLVM targets (level 10), so this one is used.
LOWERING_LEVEL = 99


class _Lets:
    """Values the lowering uses more than once, each computed once: :meth:`bind` names one
    (a variable or a constant stays as it is) and :meth:`around` wraps the result in their
    ``Let`` s, the first bound outermost. The lowerings below use their operands many times; as
    copies of a tree, an operand that is itself an expression (LRN's ``1 + α·Σx²`` under a
    pow, whose log and exp each repeat theirs) grew the kernel exponentially: 33 s to compile
    and 817 ms to run a 96×54×54 LRN, measured 2026-12-05."""

    def __init__(self) -> None:
        self._bound: list[tuple[tirx.Var, tirx.PrimExpr]] = []

    def bind(self, value: tirx.PrimExpr, name: str) -> tirx.PrimExpr:
        if isinstance(value, tirx.Var | tirx.FloatImm | tirx.IntImm | tirx.Broadcast):
            return value
        var = tirx.Var(name, str(value.ty.dtype))
        self._bound.append((var, value))
        return var

    def around(self, body: tirx.PrimExpr) -> tirx.PrimExpr:
        for var, value in reversed(self._bound):
            body = tirx.Let(var, value, body)
        return body


def fast_exp(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """``e^x`` for an fp32 expression (scalar or vector), in arithmetic and bit operations."""
    dtype = str(x.ty.dtype)
    lanes = DataType(dtype).lanes
    f32 = "float32"
    i32 = "int32" if lanes == 1 else f"int32x{lanes}"
    lets = _Lets()
    x = lets.bind(
        tirx.max(tirx.min(x, tirx.const(EXP_HIGH, f32)), tirx.const(EXP_LOW, f32)), "exp_x"
    )
    n = lets.bind(tirx.floor(x * tirx.const(_LOG2E, f32) + tirx.const(0.5, f32)), "exp_n")
    r = lets.bind(x - n * tirx.const(_LN2_HIGH, f32) - n * tirx.const(_LN2_LOW, f32), "exp_r")
    p = tirx.const(_POLYNOMIAL[0], f32)
    for coefficient in _POLYNOMIAL[1:]:
        p = p * r + tirx.const(coefficient, f32)
    e_r = p * r * r + r + tirx.const(1.0, f32)
    exponent = tirx.Cast(i32, n) + tirx.const(127, "int32")
    two_n = tirx.reinterpret(dtype, tirx.shift_left(exponent, tirx.const(23, "int32")))
    return lets.around(two_n * e_r)


# erf(x) ≈ x·P(x²) / Q(x²) on [-4, 4]; coefficients highest degree first.
_ERF_NUMERATOR = (
    -2.72614225801306e-10,
    2.77068142495902e-08,
    -2.10102402082508e-06,
    -5.69250639462346e-05,
    -7.34990630326855e-04,
    -2.95459980854025e-03,
    -1.60960333262415e-02,
)
_ERF_DENOMINATOR = (
    -1.45660718464996e-05,
    -2.13374055278905e-04,
    -1.68282697438203e-03,
    -7.37332916720468e-03,
    -1.42647390514189e-02,
)
#: Beyond ±4, erf is ±1 in fp32 (1 - erf(4) = 1.5e-8).
ERF_BOUND = 4.0


def _polynomial(coefficients: tuple[float, ...], x: tirx.PrimExpr) -> tirx.PrimExpr:
    f32 = "float32"
    value = tirx.const(coefficients[0], f32)
    for coefficient in coefficients[1:]:
        value = value * x + tirx.const(coefficient, f32)
    return value


def fast_erf(
    x: tirx.PrimExpr, reciprocal: Callable[[tirx.PrimExpr], tirx.PrimExpr] | None = None
) -> tirx.PrimExpr:
    """``erf(x)`` for an fp32 expression (scalar or vector), as a rational function; its
    division by ``Q(x²)`` (negative, bounded away from 0) a multiplication by
    ``reciprocal(-Q)`` where one is given (``reciprocals.py``)."""
    f32 = "float32"
    lets = _Lets()
    x = lets.bind(
        tirx.max(tirx.min(x, tirx.const(ERF_BOUND, f32)), tirx.const(-ERF_BOUND, f32)), "erf_x"
    )
    x2 = lets.bind(x * x, "erf_x2")
    numerator = x * _polynomial(_ERF_NUMERATOR, x2)
    if reciprocal is None:
        ratio = numerator / _polynomial(_ERF_DENOMINATOR, x2)
    else:
        negated = tuple(-c for c in _ERF_DENOMINATOR)
        ratio = tirx.const(0.0, f32) - numerator * reciprocal(_polynomial(negated, x2))
    # Near ±4 the rational function overshoots 1 by an ulp; erf never does.
    return lets.around(tirx.max(tirx.min(ratio, tirx.const(1.0, f32)), tirx.const(-1.0, f32)))


_FLOAT32 = DataType("float32")


def is_float32(x: tirx.PrimExpr) -> bool:
    dtype = DataType(str(x.ty.dtype))
    return dtype.type_code == _FLOAT32.type_code and dtype.bits == _FLOAT32.bits


def _lower_exp(call: tirx.Call) -> tirx.PrimExpr:
    (x,) = call.args
    if is_float32(x):
        return fast_exp(x)
    # What TVM's own rule does, for the types this one leaves alone (fp64, fp16).
    return tirx.call_llvm_pure_intrin(str(x.ty.dtype), "llvm.exp", x)


def _lower_erf(call: tirx.Call) -> tirx.PrimExpr:
    (x,) = call.args
    if is_float32(x):
        return fast_erf(x)
    dtype = DataType(str(x.ty.dtype))
    if dtype.bits == 64:  # what TVM's own rule does: libm's double erf, one call per lane
        if dtype.lanes == 1:
            return tirx.call_pure_extern(str(dtype), "erf", x)
        lanes = [tirx.Shuffle([x], [tirx.IntImm("int32", i)]) for i in range(dtype.lanes)]
        calls = [tirx.call_pure_extern("float64", "erf", lane) for lane in lanes]
        return tirx.Shuffle(calls, [tirx.IntImm("int32", i) for i in range(dtype.lanes)])
    # fp16/bf16: through fp32, where TVM's rule would call erff anyway.
    wide = "float32" if dtype.lanes == 1 else f"float32x{dtype.lanes}"
    return tirx.Cast(str(dtype), fast_erf(tirx.Cast(wide, x)))


# Cephes logf: log(1 + f) = f - f²/2 + f³·P(f) for the mantissa m = 1 + f in [√½, √2).
_LOG_POLYNOMIAL = (
    7.0376836292e-2,
    -1.1514610310e-1,
    1.1676998740e-1,
    -1.2420140846e-1,
    1.4249322787e-1,
    -1.6668057665e-1,
    2.0000714765e-1,
    -2.4999993993e-1,
    3.3333331174e-1,
)
_SQRT_HALF = 0.70710678118654752440


def fast_log(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """``log(x)`` for a positive, normal fp32 expression (scalar or vector): the exponent and
    mantissa read from the bits, Cephes' polynomial on the mantissa. Zero, negative, denormal
    and non-finite inputs give meaningless values: callers select around them."""
    dtype = str(x.ty.dtype)
    lanes = DataType(dtype).lanes
    f32 = "float32"
    i32 = "int32" if lanes == 1 else f"int32x{lanes}"
    lets = _Lets()
    bits = lets.bind(tirx.reinterpret(i32, x), "log_bits")
    # x = m·2^e with m in [0.5, 1): the exponent field minus 126, the mantissa with exponent -1.
    exponent = tirx.shift_right(bits, tirx.const(23, "int32")) - tirx.const(126, "int32")
    mantissa = lets.bind(
        tirx.reinterpret(
            dtype,
            tirx.bitwise_or(
                tirx.bitwise_and(bits, tirx.const(0x007FFFFF, "int32")),
                tirx.const(0x3F000000, "int32"),
            ),
        ),
        "log_m",
    )
    small = mantissa < tirx.const(_SQRT_HALF, f32)
    e = lets.bind(
        tirx.Cast(dtype, exponent) - tirx.Select(small, like(x, 1.0), like(x, 0.0)), "log_e"
    )
    f = lets.bind(tirx.Select(small, mantissa + mantissa, mantissa) - tirx.const(1.0, f32), "log_f")
    f2 = lets.bind(f * f, "log_f2")
    y = _polynomial(_LOG_POLYNOMIAL, f) * f * f2
    y = y + e * tirx.const(_LN2_LOW, f32) - tirx.const(0.5, f32) * f2
    return lets.around(f + y + e * tirx.const(_LN2_HIGH, f32))


def like(x: tirx.PrimExpr, value: float) -> tirx.PrimExpr:
    """The fp32 constant ``value`` with ``x``'s lanes: a vector ``Select`` takes no scalar
    branch (the lowering meets ``pow`` after vectorization, a float32x16 argument)."""
    lanes = DataType(str(x.ty.dtype)).lanes
    constant = tirx.const(value, "float32")
    return constant if lanes == 1 else tirx.Broadcast(constant, lanes)


#: Integer exponents up to this size are computed by repeated multiplication (exactly as x·x…).
_MAX_PRODUCT_EXPONENT = 4


def constant_value(value: tirx.PrimExpr) -> float | None:
    """The value of a float constant, scalar or broadcast to lanes; None for anything else."""
    if isinstance(value, tirx.Broadcast):
        value = value.value
    if isinstance(value, tirx.FloatImm | tirx.IntImm):
        return float(value.value)
    return None


def fast_power(x: tirx.PrimExpr, exponent: float) -> tirx.PrimExpr:
    """``x ** exponent`` for an fp32 expression and a constant exponent, in vector code:
    small integers by multiplication, ±½ by a square root, any other as ``exp(y·log |x|)``,
    with C's ``powf`` values at zero (0 or inf) and for negative x (the sign of an odd integer
    exponent, NaN for a fractional one)."""
    lets = _Lets()
    x = lets.bind(x, "pow_x")
    one = tirx.const(1.0, "float32")
    integral = exponent == int(exponent)
    if integral and abs(exponent) <= _MAX_PRODUCT_EXPONENT:
        value: tirx.PrimExpr = like(x, 1.0) if exponent == 0 else x
        for _ in range(int(abs(exponent)) - 1):
            value = value * x
        return lets.around(one / value if exponent < 0 else value)
    if exponent == 0.5:
        return lets.around(tirx.sqrt(x))
    zero = tirx.const(0.0, "float32")
    if exponent == -0.5:  # powf(-0, -½) is +inf, 1/√-0 would be -inf
        return lets.around(tirx.Select(x == zero, like(x, math.inf), one / tirx.sqrt(x)))
    at_zero = like(x, 0.0 if exponent > 0 else math.inf)
    magnitude = lets.bind(
        fast_exp(tirx.const(exponent, "float32") * fast_log(tirx.abs(x))), "pow_magnitude"
    )
    if not integral:
        below_zero: tirx.PrimExpr = like(x, math.nan)
    else:
        below_zero = zero - magnitude if int(exponent) % 2 else magnitude
    return lets.around(
        tirx.Select(x > zero, magnitude, tirx.Select(x == zero, at_zero, below_zero))
    )


def _lower_pow(call: tirx.Call) -> tirx.PrimExpr:
    x, y = call.args
    exponent = constant_value(y)
    if is_float32(x) and exponent is not None and math.isfinite(exponent):
        return fast_power(x, exponent)
    # What TVM's own rule does: LLVM's pow intrinsic, a libm call per element.
    return tirx.call_llvm_pure_intrin(str(x.ty.dtype), "llvm.pow", x, y)


_installed = False


def use_fast_math() -> None:
    """Make every later compile in this process lower fp32 exp by :func:`fast_exp`, fp32 erf
    by :func:`fast_erf` and fp32 pow by a constant by :func:`fast_power` (idempotent).

    Installed with the rest of our lowering by ``lowering.use_convtune_lowering``.
    """
    global _installed
    if not _installed:
        tirx.register_intrin_lowering("tirx.exp", "llvm", f=_lower_exp, level=LOWERING_LEVEL)
        tirx.register_intrin_lowering("tirx.erf", "llvm", f=_lower_erf, level=LOWERING_LEVEL)
        # TVM marks exp, sigmoid and tanh vectorizable but not erf, so its vectorizer wrote a
        # GELU epilogue's erf as 16 scalar calls per vector, left to LLVM's loop vectorizer.
        # Ours lowers a vector as well as a scalar.
        op = tvm.ir.Op.get("tirx.erf")
        if not op.get_attr("TVectorizable"):
            op.set_attr("TVectorizable", True)
        tirx.register_intrin_lowering("tirx.pow", "llvm", f=_lower_pow, level=LOWERING_LEVEL)
        _installed = True
