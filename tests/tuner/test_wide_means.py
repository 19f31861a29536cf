"""Large fp32 means accumulated in fp64 (tuner/graph/wide_means.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tvm
from onnx import helper
from tvm import te, tirx
from tvm.s_tir.meta_schedule.arg_info import ArgInfo

from convtune.tuner.graph.extract import fuse, to_relax
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.graph.wide_means import MIN_ELEMENTS, wide_mean
from convtune.tuner.library import compile_untuned
from convtune.tuner.measure.runtime import Artifact
from convtune.tuner.target import make_target
from tests import models


def _two_means(small: int, large: int) -> bytes:
    """ReduceMean over H, W of a ``small``² map and GlobalAveragePool of a ``large``² one."""
    nodes = [
        helper.make_node("ReduceMean", ["a"], ["ma"], axes=[2, 3], keepdims=1),
        helper.make_node("GlobalAveragePool", ["b"], ["mb"]),
    ]
    vi = helper.make_tensor_value_info
    model = models.make_model(
        nodes,
        [vi("a", 1, [1, 4, small, small]), vi("b", 1, [1, 4, large, large])],
        [vi("ma", 1, [1, 4, 1, 1]), vi("mb", 1, [1, 4, 1, 1])],
        opset=17,
    )
    return models.to_bytes(model)


def test_only_the_large_mean_is_widened() -> None:
    """One kernel per mean; only the 32×32 one sums into an fp64 buffer, read from fp32 input."""
    assert 8 * 8 < MIN_ELEMENTS <= 32 * 32
    fused = fuse(to_relax(load_model(_two_means(small=8, large=32))))
    kernels = {
        tuple(int(d) for d in ArgInfo.from_prim_func(func)[0].shape): func.script()
        for func in fused.functions.values()
        if isinstance(func, tirx.PrimFunc)
    }
    assert set(kernels) == {(1, 4, 8, 8), (1, 4, 32, 32)}, list(kernels)
    assert '"float64"' in kernels[(1, 4, 32, 32)]
    assert "float64" not in kernels[(1, 4, 8, 8)]


def test_a_mean_over_160x160_is_one_rounding_from_the_exact_mean(tmp_path: Path) -> None:
    """Summed in order in fp32 (the old build, and numpy's sequential cumsum) the mean of 25,600
    values in [1, 2) is ~5e-6 off relative; accumulated in fp64 it is one fp32 rounding off."""
    ingested = load_model(models.to_bytes(models.global_avgpool_model(size=160, channels=16)))
    so = compile_untuned(ingested, make_target(None), tmp_path)  # runs here: the host's ISA
    x = (1 + np.random.default_rng(0).random((1, 16, 160, 160))).astype(np.float32)
    (got,) = Artifact.load(so, ["x"]).run({"x": x})
    exact = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    sequential = np.cumsum(x.reshape(16, -1), axis=1, dtype=np.float32)[:, -1] / 25600
    assert np.max(np.abs(sequential - exact.ravel()) / exact.ravel()) > 1e-6  # the old error
    assert np.max(np.abs(got - exact) / exact) <= 2**-23


@pytest.mark.parametrize(("axes", "keepdims"), [([2, 3], True), ([2, 3], False), ([0, 2], False)])
def test_wide_mean_reduces_the_axes_asked_with_or_without_their_dims(axes, keepdims) -> None:
    """ReduceMean's other forms (keepdims=0, axes not last) index the input as numpy does."""
    x = te.placeholder((2, 3, 20, 20), "float32", name="x")
    y = wide_mean(x, axes, keepdims)
    kernel = tvm.compile(te.create_prim_func([x, y]), target="llvm")
    data = np.random.default_rng(1).random((2, 3, 20, 20)).astype(np.float32)
    out = tvm.runtime.tensor(np.zeros([int(d) for d in y.shape], np.float32))
    kernel(tvm.runtime.tensor(data), out)
    exact = data.astype(np.float64).mean(axis=tuple(axes), keepdims=keepdims)
    assert out.numpy().shape == exact.shape
    assert np.max(np.abs(out.numpy() - exact) / exact) <= 2**-23
