"""Denormal weights set to zero (tuner/graph/denormals.py): which values change, that the pass
runs on the weights the kernels read (after BatchNorm folding), and that the model still matches
onnxruntime run on the original weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from convtune.tuner.graph.denormals import flush_denormal_constants, flush_denormals
from convtune.tuner.graph.extract import model_for_target
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.library import compile_untuned
from convtune.tuner.measure.runtime import Artifact
from convtune.tuner.measure.verify import compare
from convtune.tuner.target import make_target
from tests import models

TINY = np.finfo(np.float32).tiny  # the smallest normal fp32, 2^-126


def test_only_denormals_become_zero() -> None:
    values = np.array(
        [0.0, -0.0, TINY, -TINY, TINY / 2, -TINY / 4, 1e-45, 1.0, np.inf, np.nan], np.float32
    )
    flushed, count = flush_denormals(values)
    assert count == 3
    np.testing.assert_array_equal(flushed[[2, 3, 7, 8]], values[[2, 3, 7, 8]])
    assert np.all(flushed[4:7] == 0) and np.isnan(flushed[9])
    same, none = flush_denormals(flushed)
    assert none == 0 and same is flushed


def _denormal_weights(weights: np.ndarray, every: int = 3) -> np.ndarray:
    """Every ``every``-th weight replaced by a denormal of its sign."""
    out = weights.copy().reshape(-1)
    out[::every] = np.copysign(TINY / 8, out[::every])
    return out.reshape(weights.shape)


@pytest.mark.parametrize("layout", ["nchw", "nchwc"])
def test_denormal_conv_weights_are_zero_in_the_compiled_model(layout: str, tmp_path: Path) -> None:
    original = models.with_conv_weights(models.three_conv_cnn(size=16), _denormal_weights)
    planted = sum(
        int(np.count_nonzero(np.abs(w) < TINY) - np.count_nonzero(w == 0))
        for w in (
            np.frombuffer(t.raw_data, np.float32) for t in original.graph.initializer if t.dims
        )
    )
    assert planted > 0
    ingested = load_model(models.to_bytes(original))
    target = make_target()
    relax_model = model_for_target(ingested, target, layout)
    # Packing (blocks, padding) copies weights without creating or losing a denormal.
    assert relax_model.denormals_flushed == planted
    assert relax_model.layout_summary()["denormals_flushed"] == planted
    assert flush_denormal_constants(relax_model.mod)[1] == 0

    feeds = models.random_inputs(original, seed=2)
    ours = Artifact.load(compile_untuned(ingested, target, tmp_path, layout), ["x"]).run(feeds)
    reference = [np.asarray(a) for a in models.run_onnxruntime(original, feeds)]
    result = compare(ours, reference, ["y"], seed=2)
    assert result.passed, result


def test_weights_batchnorm_scales_into_the_denormal_range_are_flushed() -> None:
    # Normal weights (1e-20) times a BatchNorm scale of 1e-20 fold to 1e-40: denormal only after
    # the folding, so a flush of the ONNX initializers would miss them.
    model = models.with_conv_weights(models.batchnorm_model(), lambda w: np.full_like(w, 1e-20))
    for tensor in model.graph.initializer:
        if tensor.name == "scale":
            tensor.raw_data = np.full(8, 1e-20, np.float32).tobytes()
    relax_model = model_for_target(load_model(models.to_bytes(model)), make_target(), "nchw")
    assert relax_model.denormals_flushed == 8 * 3 * 3 * 3
