"""Loading built libraries (tuner/measure/runtime.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from convtune.tuner.graph.ingest import load_model
from convtune.tuner.library import compile_untuned
from convtune.tuner.measure.runtime import Artifact
from convtune.tuner.target import make_target
from tests import models


def _scale_model(factor: float) -> onnx.ModelProto:
    """``y = x · factor`` on a 1×4 tensor."""
    spec = [1, 4]
    return models.make_model(
        [helper.make_node("Mul", ["x", "k"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, spec)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, spec)],
        [numpy_helper.from_array(np.full(spec, factor, np.float32), "k")],
    )


def test_a_library_rebuilt_at_the_same_path_runs_its_new_code(tmp_path: Path) -> None:
    """``dlopen`` hands back the library already loaded under a path: the build's fallback
    after a failed verification rewrites ``model.so`` and must not run the first build again."""
    target = make_target()
    x = {"x": np.arange(4, dtype=np.float32).reshape(1, 4)}
    results = []
    for factor in (2.0, 3.0):
        so_path = compile_untuned(
            load_model(models.to_bytes(_scale_model(factor))), target, tmp_path
        )
        results.append(Artifact.load(so_path, ["x"]).run(x)[0])
    np.testing.assert_array_equal(results[0], x["x"] * 2.0)
    np.testing.assert_array_equal(results[1], x["x"] * 3.0)
