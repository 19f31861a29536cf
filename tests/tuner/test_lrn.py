"""LRN as one kernel (tuner/graph/lrn.py, schedules/ops/lrn.py): the frontend's decomposition is
replaced, the blocked layout carries it without transforms, and the build computes what
onnxruntime does for window sizes and channel counts that cross blocks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tvm import relax
from tvm.ir import Op

from convtune.tuner.graph.extract import model_for_target, to_relax
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.library import compile_untuned
from convtune.tuner.measure.runtime import Artifact
from convtune.tuner.measure.verify import compare
from convtune.tuner.target import make_target
from tests import models

_CALL_TIR = Op.get("relax.call_tir")


def _calls(func: relax.Function) -> list[str]:
    """The ops and ``call_tir`` callees of ``func``, in order."""
    names: list[str] = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call):
            if expr.op.same_as(_CALL_TIR):
                names.append(expr.args[0].name_hint)
            elif hasattr(expr.op, "name"):
                names.append(str(expr.op.name))

    relax.analysis.post_order_visit(func.body, visit)
    return names


def test_the_frontends_eight_ops_become_one_kernel() -> None:
    relax_model = to_relax(load_model(models.to_bytes(models.lrn_model())))
    calls = _calls(relax_model.mod["main"])
    assert calls.count("local_response_norm") == 1, calls
    assert "relax.nn.avg_pool3d" not in calls and "relax.power" not in calls, calls


def test_the_blocked_layout_carries_it_without_transforms() -> None:
    ingested = load_model(models.to_bytes(models.lrn_model(channels=32)))
    relax_model = model_for_target(ingested, make_target(None), "nchwc")
    calls = _calls(relax_model.mod["main"])
    assert calls.count("local_response_norm_blocked") == 1, calls
    # Between the two blocked convs nothing leaves the layout: the one transform is the
    # model's NCHW output (the frontend's ops took one to NCHW and one back besides).
    assert relax_model.plan is not None and relax_model.plan.transforms == 1, relax_model.plan


@pytest.mark.parametrize("layout", ["nchw", "nchwc"])
@pytest.mark.parametrize(("channels", "size"), [(32, 5), (24, 3), (48, 7), (20, 5)])
def test_the_build_matches_onnxruntime(
    channels: int, size: int, layout: str, tmp_path: Path
) -> None:
    # 32 and 48 channels: blocks of 16, windows crossing them; 24: blocks of 8; 20: no block
    # divides it, so the LRN stays NCHW in either layout.
    original = models.lrn_model(channels, size, seed=channels + size)
    ingested = load_model(models.to_bytes(original))
    feeds = models.random_inputs(original, {s.name: s.shape for s in ingested.inputs}, seed=3)
    so_path = compile_untuned(ingested, make_target(None), tmp_path, layout)
    ours = Artifact.load(so_path, ["x"]).run(feeds)
    reference = [np.asarray(a) for a in models.run_onnxruntime(original, feeds)]
    result = compare(ours, reference, ["y"], seed=3)
    assert result.passed, result
