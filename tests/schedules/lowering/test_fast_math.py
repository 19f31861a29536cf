"""The vectorizable exp, erf and pow (schedules/lowering/fast_math.py): their error, and that
models use them end to end."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
from onnx import helper

from convtune.schedules.lowering.fast_math import ERF_BOUND, EXP_HIGH, EXP_LOW, use_fast_math
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.library import compile_untuned
from convtune.tuner.measure.runtime import Artifact
from convtune.tuner.measure.verify import compare
from convtune.tuner.target import make_target
from tests import models

ULP = 2.0**-23  # fp32 spacing at 1: the relative error of one ulp is at most this
POW_ULPS = 64


@pytest.fixture(scope="module")
def target():
    return make_target()


def _imports(so_path: Path, symbol: str) -> bool:
    # The dynamic string table holds every imported name NUL-terminated (versions apart).
    return b"\x00" + symbol.encode() + b"\x00" in so_path.read_bytes()


def _vectorized(target, n: int, dtype: str, so_path: Path, function=tvm.tirx.exp):
    """A 16-lane vector loop of ``function`` (a ``tirx`` intrinsic, or any expression of the
    element), compiled as the builder and model build do."""
    use_fast_math()
    x = tvm.te.placeholder((n,), dtype, name="x")
    y = tvm.te.compute((n,), lambda i: function(x[i]), name="y")
    sch = tvm.s_tir.Schedule(tvm.te.create_prim_func([x, y]))
    (loop,) = sch.get_loops(sch.get_sblock("y"))
    sch.vectorize(sch.split(loop, [None, 16])[1])
    tvm.compile(sch.mod, target=target).export_library(str(so_path))
    return tvm.runtime.load_module(str(so_path))


def test_fp32_exp_is_vector_code_within_two_ulp_and_clamps_outside_its_range(target, tmp_path):
    rng = np.random.default_rng(0)
    inside = np.concatenate(
        [
            np.linspace(EXP_LOW, EXP_HIGH, 1 << 20),
            rng.standard_normal(1 << 18) * 4,  # where sigmoid's exp lives
            [0.0, -0.0, 1.0, -1.0, np.log(2) / 2, -np.log(2) / 2],
        ]
    ).astype(np.float32)
    outside = np.array([-1e30, -200.0, -88.0, 89.0, 200.0, 1e30], np.float32)
    x = np.concatenate([inside, outside])
    y = tvm.runtime.tensor(np.zeros_like(x))
    so_path = tmp_path / "exp32.so"
    _vectorized(target, x.size, "float32", so_path)(tvm.runtime.tensor(x), y)
    assert not _imports(so_path, "expf")

    got = y.numpy()
    exact = np.exp(inside.astype(np.float64))
    rel = np.abs(got[: inside.size] - exact) / exact
    assert rel.max() <= 2 * ULP, (rel.max() / ULP, inside[rel.argmax()])
    tail = got[inside.size :]
    assert np.all(np.isfinite(tail)) and np.all(tail > 0)
    assert tail[:3].max() < 1e-37 and tail[3:].min() > 1e38


def test_fp64_exp_keeps_libm(target, tmp_path):
    # Also shows that _imports sees an imported exp when there is one.
    x = np.linspace(-700, 700, 4096)
    y = tvm.runtime.tensor(np.zeros_like(x))
    so_path = tmp_path / "exp64.so"
    _vectorized(target, x.size, "float64", so_path)(tvm.runtime.tensor(x), y)
    assert _imports(so_path, "exp")
    np.testing.assert_allclose(y.numpy(), np.exp(x), rtol=1e-15)


def test_fp32_erf_is_vector_code_within_5e7_and_saturates_outside_its_range(target, tmp_path):
    rng = np.random.default_rng(1)
    x = np.concatenate(
        [
            np.linspace(-2 * ERF_BOUND, 2 * ERF_BOUND, 1 << 20),
            rng.standard_normal(1 << 18),  # GELU's argument x/sqrt(2)
            [0.0, -0.0, 1e-30, -1e-30, 1e30, -1e30],
        ]
    ).astype(np.float32)
    y = tvm.runtime.tensor(np.zeros_like(x))
    so_path = tmp_path / "erf32.so"
    _vectorized(target, x.size, "float32", so_path, tvm.tirx.erf)(tvm.runtime.tensor(x), y)
    assert not _imports(so_path, "erff")
    exact = np.array([math.erf(v) for v in x.astype(np.float64)])
    error = np.abs(y.numpy() - exact)
    assert error.max() <= 5e-7, (error.max(), x[error.argmax()])
    assert np.all(np.abs(y.numpy()) <= 1.0)
    assert np.array_equal(np.sign(y.numpy()[x != 0]), np.sign(x[x != 0]))


def test_fp64_erf_keeps_libm(target, tmp_path):
    x = np.linspace(-6, 6, 4096)
    y = tvm.runtime.tensor(np.zeros_like(x))
    so_path = tmp_path / "erf64.so"
    _vectorized(target, x.size, "float64", so_path, tvm.tirx.erf)(tvm.runtime.tensor(x), y)
    assert _imports(so_path, "erf")
    np.testing.assert_allclose(y.numpy(), [math.erf(v) for v in x], rtol=1e-15, atol=1e-300)


def _built_as_onnxruntime_computes(
    original: onnx.ModelProto, outputs: list[str], layout: str, target, tmp_path: Path, seed: int
) -> Path:
    """``original`` compiled untuned in ``layout``; asserts its ``outputs`` match onnxruntime's
    on seeded inputs and returns the library's path."""
    ingested = load_model(models.to_bytes(original))
    feeds = models.random_inputs(original, {s.name: s.shape for s in ingested.inputs}, seed=seed)
    so_path = compile_untuned(ingested, target, tmp_path, layout)
    ours = Artifact.load(so_path, ["x"]).run(feeds)
    reference = [np.asarray(a) for a in models.run_onnxruntime(original, feeds)]
    result = compare(ours, reference, outputs, seed=seed)
    assert result.passed, result
    return so_path


def _conv_then(
    name: str,
    channels: int,
    seed: int,
    nodes: list[onnx.NodeProto],
    outputs: list[str],
    constants: dict[str, float] | None = None,
    gain: float = 0.5,
) -> onnx.ModelProto:
    """``x[1,3,10,10]`` → a 3×3 conv of ``channels`` seeded filters (its output named "c") →
    ``nodes``; ``outputs`` are ``[1, channels, 10, 10]``, ``constants`` scalar initializers."""
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((channels, 3, 3, 3)) * gain).astype(np.float32)
    conv = helper.make_node(
        "Conv", ["x", "W"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1] * 4
    )
    shape = [1, channels, 10, 10]
    scalars = [
        onnx.numpy_helper.from_array(np.array(value, np.float32), key)
        for key, value in (constants or {}).items()
    ]
    return models.make_model(
        [conv, *nodes],
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 10, 10])],
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, shape) for n in outputs],
        [onnx.numpy_helper.from_array(weight, "W"), *scalars],
        name=name,
    )


def _silu_exp_softmax_model(channels: int, seed: int = 0) -> onnx.ModelProto:
    """Conv → SiLU (x·Sigmoid x) → Exp of a scaled copy, and a Softmax head over channels."""
    nodes = [
        helper.make_node("Sigmoid", ["c"], ["s"], name="sigmoid"),
        helper.make_node("Mul", ["c", "s"], ["silu"], name="silu"),
        helper.make_node("Mul", ["silu", "k"], ["scaled"], name="scale"),
        helper.make_node("Exp", ["scaled"], ["e"], name="exp"),
        helper.make_node("Softmax", ["c"], ["p"], name="softmax", axis=1),
    ]
    return _conv_then("silu_exp_softmax", channels, seed, nodes, ["e", "p"], {"k": 0.25})


def _gelu_model(channels: int, seed: int = 0) -> onnx.ModelProto:
    """Conv → Erf-GELU (x·0.5·(1 + erf(x/√2))), as PaddlePaddle and PyTorch export it."""
    nodes = [
        helper.make_node("Div", ["c", "sqrt2"], ["d"], name="div"),
        helper.make_node("Erf", ["d"], ["e"], name="erf"),
        helper.make_node("Add", ["e", "one"], ["a"], name="add"),
        helper.make_node("Mul", ["c", "a"], ["m"], name="mul"),
        helper.make_node("Mul", ["m", "half"], ["y"], name="half"),
    ]
    constants = {"sqrt2": math.sqrt(2), "one": 1.0, "half": 0.5}
    return _conv_then("gelu", channels, seed, nodes, ["y"], constants)


@pytest.mark.parametrize(
    "exponent", [0.75, -0.75, 2.5, -1.5, 2.0, 3.0, -1.0, 0.5, -0.5, 0.0, 5.0, -6.0]
)
def test_fp32_pow_by_a_constant_is_vector_code_close_to_powf(target, tmp_path, exponent):
    """LRN's ``(bias + α·Σx²/n)^β`` and ONNX Pow by a constant: no ``powf`` call per element."""
    # A whole number of 16-lane vectors: with a tail the loop is predicated, stays scalar,
    # and the vector form of the lowering (float32x16 operands) is never built.
    extra = [1e-3, 0.1, 0.25, 0.5, 2.0, 3.0, 7.0, 10.0, 123.0, 1e5]
    x = np.concatenate(
        [np.geomspace(1e-6, 1e6, 1 << 16), extra, [0.0, -0.0, -2.0, -1.0, 1.0, np.inf]]
    ).astype(np.float32)
    assert x.size % 16 == 0
    out = tvm.runtime.tensor(np.zeros_like(x))
    so_path = tmp_path / "pow32.so"
    power = _vectorized(target, x.size, "float32", so_path, lambda v: tvm.te.power(v, exponent))
    power(tvm.runtime.tensor(x), out)
    assert not _imports(so_path, "powf")

    got, exact = out.numpy(), np.power(x.astype(np.float64), exponent)
    positive = (x > 0) & np.isfinite(x)
    rel = np.abs(got[positive] - exact[positive]) / exact[positive]
    # exp(y·log x) in fp32: y·log x rounds at its magnitude (up to 35 here), which exp turns
    # into a relative error of that many half-ulps: 26.5 ulp measured at x^2.5 near 1e6.
    assert rel.max() <= POW_ULPS * ULP, (rel.max() / ULP, x[positive][rel.argmax()])
    with np.errstate(divide="ignore", invalid="ignore"):
        special = np.power(x[~positive].astype(np.float64), exponent)
    np.testing.assert_array_equal(np.isnan(got[~positive][:-1]), np.isnan(special[:-1]))
    finite = ~np.isnan(special[:-1])
    np.testing.assert_allclose(
        got[~positive][:-1][finite], special[:-1][finite], rtol=POW_ULPS * ULP
    )  # (-2)^5 through exp and log: not exact


def _lrn_model(channels: int, seed: int = 0) -> onnx.ModelProto:
    """Conv → ReLU → LRN (AlexNet's: size 5, α 1e-4, β 0.75, bias 1)."""
    nodes = [
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("LRN", ["r"], ["y"], name="lrn", size=5, alpha=1e-4, beta=0.75, bias=1.0),
    ]
    return _conv_then("lrn", channels, seed, nodes, ["y"], gain=2.0)


#: Models whose activations TVM compiled to a libm call per element: (model, outputs, seed,
#: the libm function our lowering replaces).
_LIBM_CASES = {
    "silu_exp_softmax": (_silu_exp_softmax_model, ["e", "p"], 3, "expf"),
    "erf_gelu": (_gelu_model, ["y"], 5, "erff"),
    "lrn": (_lrn_model, ["y"], 7, "powf"),
}


@pytest.mark.parametrize("layout", ["nchw", "nchwc"])
@pytest.mark.parametrize("case", list(_LIBM_CASES))
def test_model_compiles_without_its_libm_call_and_matches_onnxruntime(
    case: str, layout: str, target, tmp_path: Path
) -> None:
    build, outputs, seed, libm_function = _LIBM_CASES[case]
    so_path = _built_as_onnxruntime_computes(
        build(16), outputs, layout, target, tmp_path, seed=seed
    )
    assert not _imports(so_path, libm_function)
