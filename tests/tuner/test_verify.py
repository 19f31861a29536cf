"""Verification against onnxruntime: the tolerance rule, and a wrong artifact is refused."""

from __future__ import annotations

import numpy as np
import pytest

from convtune.tuner.errors import VerificationError
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.library import compile_untuned
from convtune.tuner.measure.runtime import Artifact, set_threads
from convtune.tuner.measure.verify import ATOL, QUANT_STEPS, RTOL, compare, verify_artifact
from convtune.tuner.options import Layout
from convtune.tuner.target import make_target
from tests.models import conv_net, to_bytes


def test_tolerance_scales_with_the_output_magnitude() -> None:
    ref = np.array([1000.0, 1.0], dtype=np.float32)
    # atol = 1e-4 * max|ref| = 0.1 absolute on every element, plus rtol * |ref|.
    ok = compare([ref + np.float32(0.09)], [ref], ["y"], 0)
    assert ok.passed and ok.rtol == RTOL and ok.atol == ATOL
    bad = compare([ref + np.array([0.0, 0.3], dtype=np.float32)], [ref], ["y"], 0)
    assert not bad.passed and bad.worst_output == "y"
    assert bad.max_abs_err == pytest.approx(0.3, rel=1e-3)


@pytest.mark.parametrize(
    ("ours", "why"),
    [
        ([np.ones(3, np.float32), np.ones(3, np.float32)], "count"),
        ([np.ones(4, np.float32)], "shape"),
        ([np.array([1.0, np.nan, 1.0], np.float32)], "nan"),
    ],
)
def test_count_shape_and_non_finite_mismatches_fail(ours, why) -> None:
    assert not compare(ours, [np.ones(3, np.float32)], ["y"], 0).passed, why


def test_a_nan_reads_as_an_infinite_error_on_its_output() -> None:
    ours = [np.ones(3, np.float32), np.array([1.0, np.nan, 1.0], np.float32)]
    result = compare(ours, [np.ones(3, np.float32)] * 2, ["a", "b"], 0)
    assert not result.passed
    assert result.worst_output == "b" and result.max_abs_err == float("inf")
    # NaN in the reference (the model itself) fails too, instead of passing as "error 0".
    nan_ref = [np.array([np.nan], np.float32)]
    assert not compare([np.zeros(1, np.float32)], nan_ref, ["y"], 0).passed


def test_quantized_outputs_are_compared_in_steps_plus_onnxruntimes_own_spread() -> None:
    ref = np.array([0.0, 0.5, 1.0, 1.5], np.float32)  # a u8 output dequantized with step 0.5
    ours = ref + np.float32(0.5 * 6)  # six steps off everywhere
    steps = {"y": 0.5}
    alone = compare([ours], [ref], ["y"], 0, steps)
    assert not alone.passed and alone.max_steps == pytest.approx(6.0)
    assert alone.step_tolerance == QUANT_STEPS
    # onnxruntime's two executions differing by 3 steps widen the gate to 4 + 3.
    spread = compare([ours], [ref], ["y"], 0, steps, {"y": 3.0})
    assert spread.passed and spread.step_tolerance == QUANT_STEPS + 3.0
    assert not compare([ours + np.float32(0.5 * 2)], [ref], ["y"], 0, steps, {"y": 3.0}).passed
    # A spread on another output does not widen this one's.
    assert not compare([ours], [ref], ["y"], 0, steps, {"z": 30.0}).passed


def test_an_artifact_of_another_model_is_refused(tmp_path) -> None:
    target = make_target(None)
    built = load_model(to_bytes(conv_net(in_channels=3, out_channels=8, size=8, seed=1)))
    other = load_model(to_bytes(conv_net(in_channels=3, out_channels=8, size=8, seed=2)))
    so_path = compile_untuned(built, target, tmp_path, Layout.NCHW)
    set_threads(1)
    artifact = Artifact.load(so_path, ["x"])
    assert verify_artifact(artifact, built, threads=1).passed
    with pytest.raises(VerificationError):
        verify_artifact(artifact, other, threads=1)
