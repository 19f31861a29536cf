"""``--precision bf16``: which convs become bf16×bf16→fp32 convs (tuner/graph/bf16.py,
conv_kinds/dot.py), what the job says of the others, the tolerance verification applies
(tuner/measure/verify.py), and a tuned bf16 model against onnxruntime's fp32.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tvm.s_tir import meta_schedule as ms
from tvm.target import Target

from convtune.schedules.ops.isa import has_amx_bf16, has_bf16
from convtune.schedules.ops.winograd_conv import weight_itemsize
from convtune.schedules.spaces.amx_conv import Bf16AmxConvSpace
from convtune.schedules.spaces.bf16_dot import SPACE_NAME
from convtune.tuner.algorithms import weight_bytes
from convtune.tuner.graph.bf16 import round_to_bf16
from convtune.tuner.graph.extract import extract_tasks, model_for_target, to_relax
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.library import build_library, compile_untuned
from convtune.tuner.measure.runtime import Artifact
from convtune.tuner.measure.verify import ATOL, BF16_RTOL, RTOL, compare
from convtune.tuner.options import Algorithm, Precision, TuneOptions
from convtune.tuner.pipeline import tune_model
from convtune.tuner.target import make_target
from tests import models

ZEN4 = "llvm -mcpu=znver4 -num-cores=2"
needs_bf16 = pytest.mark.skipif(
    not has_bf16(make_target(None)), reason="the host CPU has no AVX-512 BF16 (vdpbf16ps)"
)


def _cnn():
    """3 → 16 (stem, 3×3) → 32 (3×3, stride 2) → 32 (1×1), each + ReLU, then a Gemm."""
    return models.three_conv_cnn(size=16, channels=(3, 16, 32, 32))


def test_eligible_convs_are_bf16_the_stem_too() -> None:
    ingested = load_model(models.to_bytes(_cnn()))
    relax_model, tasks = extract_tasks(ingested, make_target(ZEN4), "nchwc", precision="bf16")
    plan = relax_model.plan
    assert plan is not None
    convs = sorted(plan.convs, key=lambda c: c.index)
    assert [c.precision for c in convs] == ["bf16", "bf16", "bf16"]
    assert all(c.blocked for c in convs)
    lines = [line for line in relax_model.fallbacks if line.startswith("bf16:")]
    assert lines == ["bf16: 3 of 3 convs run as bf16×bf16→fp32 AVX-512 BF16 kernels"]
    reasons = {
        node: task.description["layout_reason"]
        for task in tasks
        if task.kind == "conv"
        for node in task.onnx_nodes
    }
    assert reasons["conv1"] == reasons["conv2"] == "bf16×bf16→fp32 (AVX-512 BF16)"
    assert reasons["conv0"] == "bf16×bf16→fp32 stem (AVX-512 BF16, NCHW4c in)"


def test_fp32_is_the_default_and_has_no_bf16_note() -> None:
    relax_model, _ = extract_tasks(load_model(models.to_bytes(_cnn())), make_target(ZEN4), "nchwc")
    assert relax_model.plan is not None
    assert {c.precision for c in relax_model.plan.convs} == {"fp32"}
    assert not any(line.startswith("bf16") for line in relax_model.fallbacks)


@pytest.mark.parametrize("mcpu", ["skylake-avx512", "icelake-server", "znver3"])
def test_no_bf16_conv_without_avx512_bf16(mcpu: str) -> None:
    """Skylake-SP and Ice Lake have AVX-512 without BF16; Zen 3 has neither."""
    target = make_target(f"llvm -mcpu={mcpu} -num-cores=2")
    assert not has_bf16(target)
    relax_model = to_relax(load_model(models.to_bytes(_cnn())), target, Precision.BF16)
    assert relax_model.fallbacks == ("bf16: every conv stays fp32: the CPU has no AVX-512 BF16",)


def test_the_nchw_layout_keeps_fp32_and_says_why() -> None:
    relax_model, _ = extract_tasks(
        load_model(models.to_bytes(_cnn())), make_target(ZEN4), "nchw", precision="bf16"
    )
    assert "bf16: every conv stays fp32: bf16 convs need the blocked layout" in (
        relax_model.fallbacks
    )


def test_bf16_tolerance_is_relative_to_the_outputs_range() -> None:
    reference = np.linspace(-10, 10, 200, dtype=np.float32).reshape(2, 100)
    near = reference + np.float32(0.5 * BF16_RTOL * 10)
    far = reference + np.float32(3 * BF16_RTOL * 10)
    assert compare([near], [reference], ["y"], 0, precision="bf16").passed
    assert not compare([far], [reference], ["y"], 0, precision="bf16").passed
    fp32 = compare([near], [reference], ["y"], 0)
    assert not fp32.passed and (fp32.rtol, fp32.atol) == (RTOL, ATOL)
    bf16 = compare([near], [reference], ["y"], 0, precision="bf16")
    assert (bf16.rtol, bf16.atol) == (BF16_RTOL, BF16_RTOL)
    assert bf16.top1_agreement == 1.0


@needs_bf16
@pytest.mark.parametrize("in_channels", [32, 3], ids=["conv", "stem"])
def test_an_untuned_bf16_build_computes_in_bf16(tmp_path: Path, in_channels: int) -> None:
    """The bf16 build agrees with a numpy model of its arithmetic (inputs and weights rounded to
    bf16 at each bf16 conv) better than with the fp32 model: the kernels really multiply bf16.
    The RGB stem's too (3 channels padded to 4)."""
    model = models.conv_net(in_channels=in_channels, out_channels=64, size=12, seed=2)
    ingested = load_model(models.to_bytes(model))
    so_path = compile_untuned(ingested, make_target(None), tmp_path, precision=Precision.BF16)
    to_bf16_model, to_fp32_model = _errors(model, ingested, so_path)
    assert to_bf16_model < 1e-5 < to_fp32_model < BF16_RTOL, (to_bf16_model, to_fp32_model)


def _errors(model, ingested, so_path: Path) -> tuple[float, float]:
    """max|ours − reference| / max|fp32 output| against two onnxruntime references: the model
    with its conv inputs and weights rounded to bf16 (the direct bf16 arithmetic), and the fp32
    model."""
    feeds = models.random_inputs(model, seed=3)
    (ours,) = Artifact.load(so_path, [s.name for s in ingested.inputs]).run(feeds)
    (fp32,) = models.run_onnxruntime(model, feeds)
    rounded = models.with_conv_weights(model, round_to_bf16)
    (bf16,) = models.run_onnxruntime(rounded, {k: round_to_bf16(v) for k, v in feeds.items()})
    scale = float(np.abs(fp32).max())
    return float(np.abs(ours - bf16).max()) / scale, float(np.abs(ours - fp32).max()) / scale


@needs_bf16
def test_a_tuned_bf16_job_is_verified_and_says_its_precision(sqlite_engine, tmp_path) -> None:
    model = models.three_conv_cnn(size=24, channels=(16, 32, 32, 64))
    ingested = load_model(models.to_bytes(model), name="cnn3")
    options = TuneOptions(trials_per_task=8, seed=1, precision=Precision.BF16, compare=False)
    result = tune_model(ingested, tmp_path / "out", options, engine=sqlite_engine)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["precision"] == "bf16"
    assert [c["precision"] for c in manifest["layout_plan"]["convs"]] == ["bf16"] * 3
    verification = manifest["verification"]
    assert verification["passed"] and verification["rtol"] == BF16_RTOL
    spaces = {layer.get("space") for layer in manifest["layers"] if layer["kind"] == "conv"}
    # On AMX-BF16 hosts every conv of this model is a tile conv (conv kind bf16-amx).
    expected = Bf16AmxConvSpace.name if has_amx_bf16(make_target(None)) else SPACE_NAME
    assert expected in spaces, manifest["layers"]
    assert result.so_path.is_file()


def _three_by_three(seed: int = 2):
    """One 32 → 64 3×3 stride-1 conv + ReLU: a bf16 conv Winograd may compute."""
    return models.conv_net(in_channels=32, out_channels=64, size=12, seed=seed)


def test_a_bf16_3x3_conv_gets_a_bf16_winograd_f2_task_only() -> None:
    """F(2×2) only (conv_kinds/winograd.py: F(4×4)'s rounding in bf16), its transformed weights
    bf16 (2 bytes each, what the build's bandwidth bound counts)."""
    ingested = load_model(models.to_bytes(_three_by_three()))
    relax_model, tasks = extract_tasks(
        ingested, make_target(ZEN4), "nchwc", tuple(Algorithm), precision="bf16"
    )
    assert relax_model.plan is not None
    (conv,) = relax_model.plan.convs
    assert conv.precision == "bf16" and conv.winograd_eligible
    assert conv.winograd_tile_sizes == (2,)
    (winograd,) = [t for t in tasks if t.winograd_tile]
    assert winograd.winograd_tile == 2 and winograd.convs == [0]
    assert weight_itemsize(winograd.mod) == 2
    assert weight_bytes(winograd, 2) == 64 * 32 * 16 * 2
    # The fp32 build of the same model offers both tiles, fp32 weights.
    _, fp32_tasks = extract_tasks(ingested, make_target(ZEN4), "nchwc", tuple(Algorithm))
    fp32 = [t for t in fp32_tasks if t.winograd_tile]
    assert sorted(t.winograd_tile for t in fp32) == [2, 4]
    assert {weight_itemsize(t.mod) for t in fp32} == {4}


def _without_amx(target: Target) -> Target:
    """``target`` with its AMX features off: on an AMX Xeon a bf16 conv is the AMX kind's,
    which has no Winograd variant (its direct kernel on tiles is the faster one)."""
    spec = {
        "kind": "llvm",
        "mcpu": str(target.attrs["mcpu"]),
        "mattr": [*(str(a) for a in target.attrs.get("mattr", [])), "-amx-tile", "-amx-bf16"],
    }
    if "num-cores" in target.attrs:
        spec["num-cores"] = int(target.attrs["num-cores"])
    return Target(spec)


@needs_bf16
def test_a_bf16_winograd_build_matches_onnxruntime(tmp_path: Path) -> None:
    """The model built with its conv as bf16 Winograd F(2×2) (unscheduled, no record) is within
    the bf16 tolerance of onnxruntime's fp32, and not the direct bf16 kernel's arithmetic."""
    model = _three_by_three()
    ingested = load_model(models.to_bytes(model))
    target = _without_amx(make_target(None))
    assert not has_amx_bf16(target)
    relax_model = model_for_target(ingested, target, "nchwc", {0: 2}, Precision.BF16)
    assert relax_model.plan is not None
    assert relax_model.plan.convs[0].algorithm == "winograd F(2x2,3x3)"
    so_path = build_library(
        relax_model, ms.database.MemoryDatabase(), target, tmp_path, default_schedules=False
    )
    to_direct, to_fp32 = _errors(model, ingested, so_path)
    assert to_direct > 1e-5 and to_fp32 < BF16_RTOL / 3, (to_direct, to_fp32)
