"""64-channel blocks for the int8 tensors of AMX convs (tuner/graph/tile_blocks.py): which
channel counts the layout pass holds in ``NCHW64c``, and an untuned build of such a model
against onnxruntime on an AMX host."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from bench.qdq import quantize_qdq
from convtune.schedules.ops.isa import has_amx_int8
from convtune.tuner.graph.extract import model_for_target, to_relax
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.graph.tile_blocks import tile_blocked_counts
from convtune.tuner.library import compile_untuned
from convtune.tuner.measure.runtime import Artifact
from convtune.tuner.target import make_target
from tests import models
from tests.tuner.test_quantized import _Graph, _onnxruntime_unoptimized, _output_step

SAPPHIRE_RAPIDS = "llvm -mcpu=sapphirerapids -num-cores=2"
ZEN4 = "llvm -mcpu=znver4 -num-cores=2"


def wide_net() -> onnx.ModelProto:
    """``x[1,64,16,16]`` → conv_a 3×3 64→64 → ReLU → MaxPool 2×2 → conv_b 1×1 64→128 →
    ReLU → conv_c 1×1 128→128 → Add with conv_b's ReLU → conv_d 5×5 128→32 → ``y[1,32,8,8]``.

    Only AMX convs read and write the 64 channels; a 5×5 kernel (wider than the op's four
    columns: a VNNI conv) reads the 128."""
    g = _Graph()
    a = g.op("Relu", [g.conv("x", "conv_a", 64, 64, 3)], "relu_a")
    pooled = g.op("MaxPool", [a], "pool")
    g.nodes[-1].attribute.extend(
        [onnx.helper.make_attribute(k, [2, 2]) for k in ("kernel_shape", "strides")]
    )
    b = g.op("Relu", [g.conv(pooled, "conv_b", 64, 128, 1)], "relu_b")
    res = g.op("Add", [g.conv(b, "conv_c", 128, 128, 1), b], "residual")
    g.conv(res, "conv_d", 128, 32, 5)
    return g.model([1, 64, 16, 16], "conv_d")


def split_net() -> onnx.ModelProto:
    """YOLOv8's C2f: ``x[1,64,16,16]`` → conv_a 1×1 64→64 → Split 32 + 32 → conv_b 3×3 32→32
    on the second → Concat of the three (96) → conv_c 1×1 96→64."""
    g = _Graph()
    a = g.conv("x", "conv_a", 64, 64, 1)
    g.inits.append(onnx.numpy_helper.from_array(np.array([32, 32], np.int64), "halves"))
    g.nodes.append(onnx.helper.make_node("Split", [a, "halves"], ["a1", "a2"], axis=1))
    b = g.conv("a2", "conv_b", 32, 32, 3)
    g.nodes.append(onnx.helper.make_node("Concat", ["a1", "a2", b], ["cat"], axis=1))
    g.conv("cat", "conv_c", 96, 64, 1)
    return g.model([1, 64, 16, 16], "conv_c")


def classifier_net() -> onnx.ModelProto:
    """``x[1,64,8,8]`` → conv_a 3×3 64→64 → ReLU → conv_b 1×1 64→128 → ReLU → conv_c 1×1
    128→128 → ReLU → GlobalAveragePool → Flatten → Gemm 128→10 → ``y[1,10]``: ResNet's tail,
    whose Gemm the QDQ rewrite makes a VNNI conv of one pixel (10 classes padded to 64)."""
    g = _Graph()
    a = g.op("Relu", [g.conv("x", "conv_a", 64, 64, 3)], "relu_a")
    b = g.op("Relu", [g.conv(a, "conv_b", 64, 128, 1)], "relu_b")
    c = g.op("Relu", [g.conv(b, "conv_c", 128, 128, 1)], "relu_c")
    flat = g.op("Flatten", [g.op("GlobalAveragePool", [c], "pool")], "flat")
    weight = g.rng.standard_normal((10, 128)) / np.sqrt(128)
    g.inits.append(onnx.numpy_helper.from_array(weight.astype(np.float32), "fc.w"))
    g.nodes.append(onnx.helper.make_node("Gemm", [flat, "fc.w"], ["y"], transB=1))
    return g.model([1, 64, 8, 8], "y")


@pytest.fixture(scope="module")
def classifier_qdq() -> onnx.ModelProto:
    return quantize_qdq(classifier_net())


@pytest.fixture(scope="module")
def wide_qdq() -> onnx.ModelProto:
    return quantize_qdq(wide_net())


def test_only_counts_that_amx_convs_alone_read_and_write_are_tile_blocked(wide_qdq) -> None:
    mod = to_relax(load_model(models.to_bytes(wide_qdq)), make_target(SAPPHIRE_RAPIDS)).mod
    assert tile_blocked_counts(mod, ("int8", "bf16")) == {64}
    assert tile_blocked_counts(mod, ("bf16",)) == frozenset(), "no AMX-INT8: none"
    fp32 = to_relax(load_model(models.to_bytes(wide_net())), make_target(SAPPHIRE_RAPIDS)).mod
    assert tile_blocked_counts(fp32, ("int8", "bf16")) == frozenset(), "fp32 convs: none"


def test_a_count_split_into_smaller_blocks_keeps_its_block() -> None:
    """Only AMX convs touch the 64 channels, but a Split cuts them into 32s (16-channel blocks),
    which the layout pass can only do from 16-channel blocks: 64 stays NCHW16c."""
    qdq = quantize_qdq(split_net())
    mod = to_relax(load_model(models.to_bytes(qdq)), make_target(SAPPHIRE_RAPIDS)).mod
    assert tile_blocked_counts(mod, ("int8",)) == frozenset()
    without_split = quantize_qdq(wide_net())
    mod = to_relax(load_model(models.to_bytes(without_split)), make_target(SAPPHIRE_RAPIDS)).mod
    assert tile_blocked_counts(mod, ("int8",)) == {64}


def test_the_plan_holds_them_in_64_channel_blocks_on_amx_only(wide_qdq) -> None:
    ingested = load_model(models.to_bytes(wide_qdq))
    plan = model_for_target(ingested, make_target(SAPPHIRE_RAPIDS)).plan
    assert plan is not None and plan.tile_blocked == [64]
    layouts = {c.index: (c.layout, c.reason) for c in plan.convs}
    amx, vnni = "u8×s8→s32 (AMX tiles)", "u8×s8→s32 (VNNI)"
    assert layouts == {
        0: ("NCHW64c", amx),
        1: ("NCHW64c→NCHW16c", amx),
        2: ("NCHW16c", amx),
        3: ("NCHW16c", vnni),
    }
    # The model's input into blocks, its output out of them: no transform between.
    assert plan.transforms == 2
    zen4 = model_for_target(ingested, make_target(ZEN4)).plan
    assert zen4 is not None and zen4.tile_blocked == []
    assert {c.layout for c in zen4.convs} == {"NCHW16c"}


def test_a_classifier_of_one_pixel_reads_and_writes_tile_blocked_counts(classifier_qdq) -> None:
    """The classifier's VNNI conv reads 128 channels and writes 64 (10 padded), both at one
    pixel: it takes no part in the choice, and gets its 16-channel blocks by reshapes."""
    ingested = load_model(models.to_bytes(classifier_qdq))
    relaxed = to_relax(ingested, make_target(SAPPHIRE_RAPIDS)).mod
    assert tile_blocked_counts(relaxed, ("int8",)) == {64, 128}
    plan = model_for_target(ingested, make_target(SAPPHIRE_RAPIDS)).plan
    assert plan is not None and plan.tile_blocked == [64, 128]
    layouts = [(c.layout, c.reason) for c in plan.convs]
    amx, vnni = "u8×s8→s32 (AMX tiles)", "u8×s8→s32 (VNNI)"
    assert layouts == [
        ("NCHW64c", amx),
        ("NCHW64c", amx),
        ("NCHW64c", amx),
        ("NCHW16c→NCHW64c", vnni),
    ]
    # The model's input into blocks; the pooled pixel out of them (Flatten) and back (for the
    # classifier); the padded classes out. Between 64- and 16-channel blocks: reshapes only.
    assert plan.transforms == 4


@pytest.mark.skipif(
    not has_amx_int8(make_target(None)), reason="the host CPU has no AMX-INT8: no tile blocks"
)
def test_untuned_classifier_with_tile_blocks_matches_onnxruntime(
    classifier_qdq, tmp_path: Path
) -> None:
    ingested = load_model(models.to_bytes(classifier_qdq))
    so_path = compile_untuned(ingested, make_target(None), tmp_path)
    feeds = models.random_inputs(classifier_qdq, seed=1)
    (ours,) = Artifact.load(so_path, ["x"]).run(feeds)
    reference = _onnxruntime_unoptimized(classifier_qdq, feeds)
    assert ours.shape == reference.shape == (1, 10)
    steps = np.abs(ours.astype(np.float64) - reference) / _output_step(classifier_qdq)
    assert steps.max() <= 1.001, steps
    assert len(np.unique(ours)) > 5  # not all clamped


@pytest.mark.skipif(
    not has_amx_int8(make_target(None)), reason="the host CPU has no AMX-INT8: no tile blocks"
)
def test_untuned_tile_blocked_model_matches_onnxruntime(wide_qdq, tmp_path: Path) -> None:
    ingested = load_model(models.to_bytes(wide_qdq))
    so_path = compile_untuned(ingested, make_target(None), tmp_path)
    feeds = models.random_inputs(wide_qdq, seed=1)
    (ours,) = Artifact.load(so_path, ["x"]).run(feeds)
    reference = _onnxruntime_unoptimized(wide_qdq, feeds)
    assert ours.shape == reference.shape == (1, 32, 8, 8)
    steps = np.abs(ours.astype(np.float64) - reference) / _output_step(wide_qdq)
    assert steps.max() <= 1.001, (steps.max(), np.argwhere(steps > 1.001)[:5])
    assert np.mean(steps > 0.5) < 0.01
    assert len(np.unique(ours)) > 32  # not all clamped
