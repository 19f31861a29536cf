"""Fallbacks of the blocked layout: a failure inside it never reaches the user as a traceback.

The failures are forced by making one of our own pass functions raise (the per-conv weight
packing, the legalization step, the fusion step), which exercises our fallback code around real
TVM compiles; nothing of TVM is mocked. Order of fallbacks: one conv kept NCHW, then the whole
model NCHW, then a one-line ``UnsupportedOpError`` (exit code 2).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tvm.s_tir import meta_schedule as ms

import convtune.tuner.graph.conv_kinds.dense as dense_kind
import convtune.tuner.graph.extract as extract
import convtune.tuner.graph.layout as layout_pass
from convtune.schedules.ops.isa import vector_lanes
from convtune.tuner.errors import UnsupportedOpError
from convtune.tuner.graph.extract import extract_tasks, model_for_target
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.library import build_library
from convtune.tuner.measure.runtime import Artifact
from convtune.tuner.measure.verify import compare
from convtune.tuner.target import make_target
from tests import models
from tests.tuner.test_layout_ops import Net


def _three_convs():
    """conv0 16→32, conv1 32→32 (the one we break), conv2 32→16: all blockable."""
    n = Net()
    a = n.conv("x", 16, 32)
    b = n.conv(a, 32, 32, kernel=1)
    return n.model(n.conv(b, 32, 16), "three_convs")


@pytest.fixture(scope="module")
def target():
    return make_target()


@pytest.fixture(scope="module")
def ingested():
    return load_model(models.to_bytes(_three_convs()))


def _matches_onnxruntime(relax_model, ingested, target, tmp_path: Path) -> bool:
    so_path = build_library(relax_model, ms.database.MemoryDatabase(), target, tmp_path)
    feeds = models.random_inputs(ingested.model, seed=2)
    ours = Artifact.load(so_path, ["x"]).run(feeds)
    reference = [np.asarray(r) for r in models.run_onnxruntime(ingested.model, feeds)]
    return compare(ours, reference, ["y"], seed=2).passed


def test_a_conv_that_fails_to_block_stays_nchw_alone(
    ingested, target, tmp_path: Path, monkeypatch
) -> None:
    real = dense_kind.block_weight

    def failing(weight: np.ndarray, *blocks: int) -> np.ndarray:
        if weight.shape[1:] == (32, 1, 1):  # the 1x1 conv only
            raise RuntimeError("Check failed: forced failure in the blocked conv rewrite")
        return real(weight, *blocks)

    monkeypatch.setattr(dense_kind, "block_weight", failing)
    relax_model = model_for_target(ingested, target)
    plan = relax_model.plan
    assert plan is not None and not plan.fallback
    blocked = f"NCHW{vector_lanes(target)}c"
    assert [c.layout for c in plan.convs] == [blocked, "NCHW", blocked]
    assert "forced failure" in plan.convs[1].reason
    (message,) = relax_model.fallbacks
    conv1 = extract.conv_node_names(ingested.model)[1]
    assert message.startswith(f"Conv {conv1!r} kept in NCHW: blocking it failed (")
    assert "forced failure in the blocked conv rewrite" in message and "\n" not in message
    assert _matches_onnxruntime(relax_model, ingested, target, tmp_path)


def test_a_failing_pass_compiles_the_whole_model_nchw(
    ingested, target, tmp_path: Path, monkeypatch
) -> None:
    def failing(mod, target):
        raise RuntimeError("Traceback (most recent call last):\n  ...\nInternalError: forced")

    monkeypatch.setattr(layout_pass, "legalize", failing)
    relax_model, tasks = extract_tasks(ingested, target)
    assert relax_model.plan is not None
    assert relax_model.fallbacks == (
        "whole model compiled in NCHW: the blocked layout pass failed: InternalError: forced",
    )
    summary = relax_model.layout_summary()
    assert summary["fallback"] == relax_model.fallbacks[0] and summary["blocked_convs"] == 0
    convs = [t for t in tasks if t.kind == "conv"]
    assert convs and all(t.description["layout"] == "NCHW" for t in convs)
    assert all("whole model" in t.description["layout_reason"] for t in convs)
    assert _matches_onnxruntime(relax_model, ingested, target, tmp_path)


def test_a_failure_of_the_blocked_model_in_fusion_falls_back_to_nchw(
    ingested, target, monkeypatch
) -> None:
    real = extract.fuse

    def failing_when_blocked(relax_model):
        if relax_model.plan is not None and not relax_model.plan.fallback:
            raise RuntimeError("Check failed: forced fusion failure")
        return real(relax_model)

    monkeypatch.setattr(extract, "fuse", failing_when_blocked)
    relax_model, tasks = extract_tasks(ingested, target)
    assert relax_model.fallbacks == (
        "whole model compiled in NCHW: task extraction of the blocked model failed: "
        "Check failed: forced fusion failure",
    )
    assert sum(t.kind == "conv" for t in tasks) == 3


def test_when_nchw_fails_too_the_error_is_one_line(ingested, target, monkeypatch) -> None:
    def failing(relax_model):
        raise RuntimeError("Traceback:\n  File x\ntvm.error.InternalError: Check failed: forced")

    monkeypatch.setattr(extract, "fuse", failing)
    with pytest.raises(UnsupportedOpError) as info:
        extract_tasks(ingested, target)
    assert info.value.exit_code == 2
    assert info.value.message == (
        "TVM could not compile the model (task extraction): "
        "tvm.error.InternalError: Check failed: forced"
    )
