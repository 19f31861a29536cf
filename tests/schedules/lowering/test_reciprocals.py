"""The divisions our lowering removes (schedules/lowering/reciprocals.py): a constant divisor
becomes a multiplication, erf's and sigmoid's divisions a refined ``vrcp14ps`` on AVX-512; the
values stay within an ulp or two of float64, and a target without AVX-512 keeps ``vdivps``."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import tvm
from tvm import tirx

from convtune.schedules.lowering.pipeline import use_convtune_lowering
from convtune.schedules.lowering.reciprocals import multiply_by_reciprocal
from convtune.schedules.ops.isa import has_avx512
from convtune.tuner.target import make_target

ULP = 2.0**-23
SQRT2 = np.float32(math.sqrt(2.0))
AVX2_TARGET = "llvm -mcpu=haswell -num-cores=2"


def _compiled(target, n: int, element: Callable[[tirx.PrimExpr], tirx.PrimExpr]):
    """A 16-lane vector loop of ``element`` over ``n`` fp32, compiled as the builder does."""
    use_convtune_lowering()
    x = tvm.te.placeholder((n,), "float32", name="x")
    y = tvm.te.compute((n,), lambda i: element(x[i]), name="y")
    sch = tvm.s_tir.Schedule(tvm.te.create_prim_func([x, y]))
    (loop,) = sch.get_loops(sch.get_sblock("y"))
    sch.vectorize(sch.split(loop, [None, 16])[1])
    return tvm.compile(sch.mod, target=target)


def _run(library, x: np.ndarray) -> np.ndarray:
    y = tvm.runtime.tensor(np.zeros_like(x))
    library(tvm.runtime.tensor(x), y)
    return y.numpy()


def _count(library, instruction: str) -> int:
    return library.mod.inspect_source("asm").count(instruction)


def _gelu(v: tirx.PrimExpr) -> tirx.PrimExpr:
    """PP-OCRv6's Erf-GELU as the ONNX graph writes it: a division by √2, erf, and products."""
    half, one = tirx.const(0.5, "float32"), tirx.const(1.0, "float32")
    return v * (tirx.erf(v / tirx.const(float(SQRT2), "float32")) + one) * half


def test_a_constant_divisor_becomes_a_multiplication_and_others_stay():
    x = tirx.Var("x", "float32x16")
    by_constant = multiply_by_reciprocal(x / tirx.Broadcast(tirx.const(4.0, "float32"), 16))
    assert isinstance(by_constant, tirx.Mul)
    assert float(by_constant.b.value.value) == 0.25
    by_variable = x / tirx.Var("d", "float32x16")
    assert multiply_by_reciprocal(by_variable).same_as(by_variable)
    by_scalar = multiply_by_reciprocal(x / tirx.Broadcast(tirx.Var("s", "float32"), 16))
    assert isinstance(by_scalar, tirx.Mul) and isinstance(by_scalar.b, tirx.Broadcast)
    assert isinstance(by_scalar.b.value, tirx.Div)  # 1/s, once per vector
    # TVM folds a literal division by zero away before it is built; the node can still occur.
    by_zero = tirx.Div(tirx.Var("s", "float32"), tirx.const(0.0, "float32"))
    assert multiply_by_reciprocal(by_zero).same_as(by_zero)


@pytest.mark.parametrize("target_text", [None, AVX2_TARGET], ids=["host", "avx2"])
def test_gelu_and_silu_are_close_to_float64_with_reciprocals_only_on_avx512(target_text):
    target = make_target(target_text)
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [rng.standard_normal(1 << 16) * 4, np.linspace(-12, 12, 4093), [0.0, -0.0, 1e-30]]
    ).astype(np.float32)  # whole vectors: a predicated tail would be scalar code
    wide = x.astype(np.float64)

    gelu = _compiled(target, x.size, _gelu)
    exact = 0.5 * wide * (1 + np.array([math.erf(v) for v in wide / math.sqrt(2)]))
    error = np.abs(_run(gelu, x) - exact)
    # erf's absolute error (5e-7) scaled by |x|/2, plus the products' rounding.
    assert np.all(error <= 5e-7 * np.abs(wide) / 2 + 4 * ULP * np.abs(exact) + 1e-30), error.max()

    silu = _compiled(target, x.size, lambda v: v * tirx.sigmoid(v))
    exact = wide / (1 + np.exp(-wide))
    rel = np.abs(_run(silu, x) - exact) / np.maximum(np.abs(exact), 1e-30)
    assert rel.max() <= 8 * ULP, rel.max() / ULP

    # Far into sigmoid's tails the refined estimate stays finite and in [0, 1].
    tails = np.repeat(np.array([-1e30, -200.0, -90.0, 90.0, 200.0, 1e30], np.float32), 16)
    sigmoid = _run(_compiled(target, tails.size, tirx.sigmoid), tails)
    assert np.all(np.isfinite(sigmoid)) and np.all((sigmoid >= 0) & (sigmoid <= 1)), sigmoid
    assert sigmoid[:48].max() < 1e-37 and sigmoid[48:].min() == 1.0

    if has_avx512(target):
        assert _count(gelu, "vrcp14ps") and not _count(gelu, "vdivps")
        assert _count(silu, "vrcp14ps") and not _count(silu, "vdivps")
    else:
        # AVX2 keeps the division (Zen 3's divider issues a ymm division every 3.5 cycles).
        assert not _count(gelu, "vrcp14ps") and _count(gelu, "vdivps")


def test_a_division_by_a_constant_is_within_an_ulp_of_numpy():
    target = make_target()
    x = np.random.default_rng(1).standard_normal(1 << 14).astype(np.float32) * 100
    library = _compiled(target, x.size, lambda v: v / tirx.const(float(SQRT2), "float32"))
    got = _run(library, x)
    assert not _count(library, "vdivps")
    np.testing.assert_allclose(got, x / SQRT2, rtol=ULP, atol=0)


def test_rows_divided_by_their_scalar_match_numpy_with_one_division_per_vector():
    """Softmax's normalization: each row by its sum. The zero and infinite divisors give
    numpy's infinities, NaNs and zeros."""
    use_convtune_lowering()
    rows, width = 6, 256
    x = tvm.te.placeholder((rows, width), "float32", name="x")
    s = tvm.te.placeholder((rows,), "float32", name="s")
    y = tvm.te.compute((rows, width), lambda i, j: x[i, j] / s[i], name="y")
    sch = tvm.s_tir.Schedule(tvm.te.create_prim_func([x, s, y]))
    _, j = sch.get_loops(sch.get_sblock("y"))
    sch.vectorize(sch.split(j, [None, 16])[1])
    library = tvm.compile(sch.mod, target=make_target())
    rng = np.random.default_rng(2)
    xs = (rng.standard_normal((rows, width)) * 10).astype(np.float32)
    xs[:, :3] = [0.0, np.inf, -np.inf]
    sums = np.array([3.7, 1e-3, 1e30, 0.0, np.inf, -2.5], np.float32)
    out = tvm.runtime.tensor(np.zeros_like(xs))
    library(tvm.runtime.tensor(xs), tvm.runtime.tensor(sums), out)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = xs / sums[:, None]
    np.testing.assert_allclose(out.numpy(), expected, rtol=2 * ULP, atol=0, equal_nan=True)
    assert not _count(library, "vdivps")
