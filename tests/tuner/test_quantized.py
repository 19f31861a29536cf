"""QDQ models: which convs the job makes u8×s8→s32 integer convs (tuner/graph/quantized.py,
conv_kinds/dot.py), what it says of the others, and the numerics of the integer path against
onnxruntime on the same QDQ model.

The models are quantized as users quantize them: onnxruntime's ``quantize_static``
(``bench/qdq.py``), u8 activations and s8 weights.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from bench.corpus.built import yolov8_like
from bench.qdq import quantize_qdq
from convtune.schedules.ops.int8 import VNNI_GROUP, VNNI_LANES, pack_weight, zero_point_correction
from convtune.schedules.ops.isa import has_vnni
from convtune.tuner.errors import VerificationError
from convtune.tuner.graph.extract import extract_tasks, model_for_target, to_relax
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.library import compile_untuned
from convtune.tuner.measure.runtime import Artifact
from convtune.tuner.measure.verify import (
    QUANT_STEPS,
    quantization_steps,
    random_feeds,
    reference_outputs,
    reference_spread,
    verify_artifact,
)
from convtune.tuner.target import make_target
from tests import models

ZEN4 = "llvm -mcpu=znver4 -num-cores=2"
VNNI_REASON = "the CPU has no AVX-512 VNNI"


def _qdq_cnn() -> onnx.ModelProto:
    """3 → 16 (stem, 3×3) → 32 (3×3, stride 2) → 32 (1×1), each + ReLU, then a Gemm."""
    return quantize_qdq(models.three_conv_cnn(channels=(3, 16, 32, 32)))


class _Graph:
    """Convs and ops on ``x[batch, channels, size, size]``, seeded weights."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def conv(
        self,
        x: str,
        name: str,
        cin: int,
        cout: int,
        kernel: int,
        *,
        stride: int = 1,
        pads: tuple[int, int, int, int] | None = None,
        group: int = 1,
    ) -> str:
        shape = (cout, cin // group, kernel, kernel)
        w = self.rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
        b = self.rng.standard_normal(cout) * 0.1
        self.inits += [
            numpy_helper.from_array(w.astype(np.float32), f"{name}.w"),
            numpy_helper.from_array(b.astype(np.float32), f"{name}.b"),
        ]
        self.nodes.append(
            helper.make_node(
                "Conv",
                [x, f"{name}.w", f"{name}.b"],
                [name],
                name=name,
                kernel_shape=[kernel, kernel],
                strides=[stride, stride],
                pads=list(pads if pads is not None else [kernel // 2] * 4),
                group=group,
            )
        )
        return name

    def op(self, op_type: str, inputs: list[str], name: str) -> str:
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name))
        return name

    def model(self, input_shape: list[int], output: str) -> onnx.ModelProto:
        inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, input_shape)]
        draft = models.make_model(self.nodes, inputs, [], self.inits, check=False)
        draft.graph.output.append(helper.ValueInfoProto(name=output))
        inferred = onnx.shape_inference.infer_shapes(draft, strict_mode=True)
        out = next(vi for vi in inferred.graph.value_info if vi.name == output)
        return models.make_model(self.nodes, inputs, [out], self.inits)


def residual_net(batch: int = 2) -> onnx.ModelProto:
    """``x[batch,16,12,12]`` → conv_a 3×3 pad 1 (no ReLU: its output's zero point is not 0) →
    conv_b 3×3 stride 2, pads (0, 1, 1, 0) → ReLU → conv_c 1×1 → residual Add with conv_b's
    ReLU → conv_d 3×3 pad 1 (reads the Add: a zero point not 0) → ReLU → ``y[batch,16,6,6]``.

    Each conv is 16 or 32 channels: all four are integer convs on a VNNI CPU."""
    g = _Graph()
    a = g.conv("x", "conv_a", 16, 32, 3)
    b = g.op("Relu", [g.conv(a, "conv_b", 32, 32, 3, stride=2, pads=(0, 1, 1, 0))], "relu_b")
    c = g.conv(b, "conv_c", 32, 32, 1)
    res = g.op("Add", [c, b], "residual")
    g.op("Relu", [g.conv(res, "conv_d", 32, 16, 3)], "y")
    return g.model([batch, 16, 12, 12], "y")


def _initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _producer(model: onnx.ModelProto, output: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if output in n.output)


def _conv_input_zero_points(model: onnx.ModelProto) -> dict[str, int]:
    """Per conv of the QDQ model, the zero point of its quantized input."""
    inits = _initializers(model)
    zero_points = {}
    for node in model.graph.node:
        if node.op_type == "Conv":
            dequantize = _producer(model, node.input[0])
            assert dequantize.op_type == "DequantizeLinear"
            zero_points[node.name] = int(inits[dequantize.input[2]])
    return zero_points


def _output_step(model: onnx.ModelProto) -> float:
    """The scale of the graph output's DequantizeLinear: one step of the u8 output."""
    dequantize = _producer(model, model.graph.output[0].name)
    assert dequantize.op_type == "DequantizeLinear"
    return float(_initializers(model)[dequantize.input[1]])


# ---------------------------------------------------------------------------------------------
# which convs are integer, and the notes
# ---------------------------------------------------------------------------------------------


def test_eligible_convs_are_int8_the_stem_and_the_classifier_too() -> None:
    """The RGB stem (3 channels, padded to 4 for one vpdpbusd group a pixel) is integer like
    the convs after it, and so is the batch-1 Gemm: a 1×1 conv of one pixel, its 10 outputs
    padded to 64, the plan's fourth conv."""
    ingested = load_model(models.to_bytes(_qdq_cnn()))
    relax_model, tasks = extract_tasks(ingested, make_target(ZEN4), "nchwc")
    plan = relax_model.plan
    assert plan is not None
    convs = sorted(plan.convs, key=lambda c: c.index)
    assert [c.precision for c in convs] == ["int8"] * 4
    assert [(c.in_channels, c.out_channels) for c in convs] == [
        (3, 16),
        (16, 32),
        (32, 32),
        (32, 64),
    ]
    assert all(c.blocked for c in convs)
    assert [c.as_dict()["precision"] for c in convs] == ["int8"] * 4
    int8_lines = [line for line in relax_model.fallbacks if line.startswith("int8:")]
    assert int8_lines == [
        "int8: 3 of 3 quantized convs run as u8×s8 VNNI kernels; "
        "1 of 1 batch-1 Gemm/MatMul as u8×s8 VNNI kernels"
    ]
    reasons = {
        node: task.description["layout_reason"]
        for task in tasks
        if task.kind == "conv"
        for node in task.onnx_nodes
    }
    assert reasons["conv1"] == reasons["conv2"] == "u8×s8→s32 (VNNI)"
    assert reasons["conv0"] == "u8×s8→s32 stem (VNNI, NCHW4c in)"
    (gemm,) = [task for task in tasks if task.kind == "gemm"]
    assert "int8" in gemm.name and gemm.onnx_nodes == ["fc"]
    assert (gemm.description["N"], gemm.description["K"]) == (10, 32)


@pytest.mark.parametrize("mcpu", ["skylake-avx512", "znver3"])
def test_no_int8_conv_without_vnni(mcpu: str) -> None:
    """Skylake-SP has AVX-512 but no VNNI; Zen 3 has neither: every conv runs in fp32."""
    target = make_target(f"llvm -mcpu={mcpu} -num-cores=2")
    assert not has_vnni(target)
    ingested = load_model(models.to_bytes(_qdq_cnn()))
    relax_model, _ = extract_tasks(ingested, target, "nchwc")
    assert relax_model.plan is not None
    assert {c.precision for c in relax_model.plan.convs} == {"fp32"}
    int8_lines = [line for line in relax_model.fallbacks if line.startswith("int8:")]
    assert int8_lines == [
        f"int8: 0 of 3 quantized convs run as u8×s8 VNNI kernels, the others in fp32 "
        f"(3× {VNNI_REASON})"
    ]


def test_each_refused_conv_is_counted_with_its_reason() -> None:
    """A grouped conv and one whose 24 output channels are not whole 16-lane chunks stay fp32;
    the 16 → 32 conv before them is integer."""
    g = _Graph(seed=1)
    a = g.op("Relu", [g.conv("x", "dense", 16, 32, 3)], "relu_a")
    b = g.op("Relu", [g.conv(a, "grouped", 32, 32, 3, group=2)], "relu_b")
    g.conv(b, "narrow", 32, 24, 1)
    qdq = quantize_qdq(g.model([1, 16, 8, 8], "narrow"))
    relax_model = to_relax(load_model(models.to_bytes(qdq)), make_target(ZEN4))
    (line,) = relax_model.fallbacks
    assert line.startswith("int8: 1 of 3 quantized convs run as u8×s8 VNNI kernels"), line
    assert "1× grouped (groups=2): no dot-product kernel of ours" in line
    assert "1× channels 32→24 not multiples of 8→16" in line
    plan = model_for_target(load_model(models.to_bytes(qdq)), make_target(ZEN4)).plan
    assert plan is not None
    assert [c.precision for c in sorted(plan.convs, key=lambda c: c.index)] == [
        "int8",
        "fp32",
        "fp32",
    ]


def test_a_float_model_has_no_int8_note() -> None:
    ingested = load_model(models.to_bytes(models.three_conv_cnn(channels=(3, 16, 32, 32))))
    relax_model, _ = extract_tasks(ingested, make_target(ZEN4), "nchwc")
    assert not any(line.startswith("int8") for line in relax_model.fallbacks)
    assert relax_model.plan is not None
    assert {c.precision for c in relax_model.plan.convs} == {"fp32"}


# ---------------------------------------------------------------------------------------------
# numerics
# ---------------------------------------------------------------------------------------------


def _onnxruntime_unoptimized(model: onnx.ModelProto, feeds) -> np.ndarray:
    """The QDQ graph as the ONNX spec defines it: every Q/DQ and conv in fp32, not fused into
    onnxruntime's QLinearConv."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(
        models.to_bytes(model), sess_options=options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, dict(feeds))[0]


@pytest.mark.skipif(
    not has_vnni(make_target(None)), reason="the host CPU has no AVX-512 VNNI: no int8 kernel"
)
@pytest.mark.parametrize("per_channel", [True, False], ids=["per-channel", "per-tensor"])
def test_untuned_int8_model_matches_onnxruntime(per_channel: bool, tmp_path: Path) -> None:
    qdq = quantize_qdq(residual_net(), per_channel=per_channel)
    # The cases are really there: padded convs whose input's zero point is not 0.
    zero_points = _conv_input_zero_points(qdq)
    assert zero_points["conv_a"] != 0 and zero_points["conv_d"] != 0, zero_points
    assert zero_points["conv_b"] != 0, zero_points  # stride 2, asymmetric pads
    assert zero_points["conv_c"] == 0, zero_points  # after a ReLU

    host = make_target(None)
    ingested = load_model(models.to_bytes(qdq))
    plan = model_for_target(ingested, host).plan
    assert plan is not None
    assert [c.precision for c in plan.convs] == ["int8"] * 4, [c.as_dict() for c in plan.convs]

    so_path = compile_untuned(ingested, host, tmp_path)
    feeds = models.random_inputs(qdq, seed=1)
    (ours,) = Artifact.load(so_path, ["x"]).run(feeds)
    step = _output_step(qdq)
    for reference in (
        _onnxruntime_unoptimized(qdq, feeds),
        models.run_onnxruntime(qdq, feeds)[0],  # onnxruntime's own integer kernels
    ):
        assert ours.shape == reference.shape
        steps = np.abs(ours.astype(np.float64) - reference) / step
        assert steps.max() <= 1.001, (steps.max(), np.argwhere(steps > 1.001)[:5])
        assert np.mean(steps > 0.5) < 0.01, np.mean(steps > 0.5)
    assert np.count_nonzero(ours) > ours.size // 4  # not all clamped by the last ReLU


@pytest.mark.skipif(
    not has_vnni(make_target(None)), reason="the host CPU has no AVX-512 VNNI: no int8 kernel"
)
def test_a_qdq_detector_is_gated_by_onnxruntimes_own_spread(tmp_path: Path) -> None:
    """A YOLO-style detector quantized by ``quantize_static``: onnxruntime's integer kernels and
    its spec-exact float QDQ graph disagree on the decoded boxes by more than QUANT_STEPS, so the
    gate adds that spread; an artifact of the same graph calibrated differently still fails."""
    qdq = quantize_qdq(yolov8_like(128))
    ingested = load_model(models.to_bytes(qdq))
    feeds = random_feeds(ingested.inputs, 0)
    steps = quantization_steps(qdq)
    assert set(steps) == {"output0"}
    spread = reference_spread(ingested, feeds, reference_outputs(ingested, feeds, 2), steps, 2)
    assert spread["output0"] > QUANT_STEPS, spread  # the case is really there

    so_path = compile_untuned(ingested, make_target(None), tmp_path)
    artifact = Artifact.load(so_path, ["images"])
    result = verify_artifact(artifact, ingested, threads=2)
    assert result.passed and result.max_steps is not None
    assert result.step_tolerance == pytest.approx(QUANT_STEPS + spread["output0"])
    assert result.max_steps <= result.step_tolerance

    recalibrated = load_model(models.to_bytes(quantize_qdq(yolov8_like(128), seed=1)))
    with pytest.raises(VerificationError, match="quantization steps"):
        verify_artifact(artifact, recalibrated, threads=2)


def silu_convs() -> onnx.ModelProto:
    """``x[1,16,20,20]`` → 3×3 conv → SiLU → 1×1 conv → SiLU, as PyTorch exports YOLO's."""
    g = _Graph()
    x = g.conv("x", "conv_a", 16, 32, 3)
    x = g.op("Mul", [x, g.op("Sigmoid", [x], "sig_a")], "silu_a")
    x = g.conv(x, "conv_b", 32, 32, 1)
    x = g.op("Mul", [x, g.op("Sigmoid", [x], "sig_b")], "silu_b")
    return g.model([1, 16, 20, 20], x)


@pytest.mark.skipif(
    not has_vnni(make_target(None)), reason="the host CPU has no AVX-512 VNNI: no int8 kernel"
)
def test_a_qdq_silu_is_a_table_read_in_the_int8_kernels_epilogue(tmp_path: Path) -> None:
    qdq = quantize_qdq(silu_convs())
    ingested = load_model(models.to_bytes(qdq))
    _, tasks = extract_tasks(ingested, make_target(None), "nchwc")
    convs = [t for t in tasks if t.kind == "conv"]
    assert len(convs) == 2, [t.name for t in tasks]
    for task in convs:
        assert "int8" in task.name and "take" in task.name, task.name
        assert "sigmoid" not in task.name, task.name

    so_path = compile_untuned(ingested, make_target(None), tmp_path)
    result = verify_artifact(Artifact.load(so_path, ["x"]), ingested, threads=2)
    assert result.passed and result.max_steps is not None and result.max_steps <= 1.001


# ---------------------------------------------------------------------------------------------
# the integer pieces, in numpy
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("in_block", [8, 16])
def test_pack_weight_puts_each_weight_in_its_vnni_tile(in_block: int) -> None:
    rng = np.random.default_rng(0)
    o, i, kh, kw = 32, 48, 3, 2
    w = rng.integers(-128, 128, (o, i, kh, kw), dtype=np.int8)
    packed = pack_weight(w, in_block)
    assert packed.shape == (o // 16, i // in_block, kh, kw, in_block, 16)
    assert packed.dtype == np.int8 and packed.flags.c_contiguous
    tiles = packed.reshape(
        o // VNNI_LANES, i // in_block, kh, kw, in_block // VNNI_GROUP, VNNI_LANES, VNNI_GROUP
    )
    oc, ic, y, x = np.indices(w.shape)
    got = tiles[
        oc // VNNI_LANES,
        ic // in_block,
        y,
        x,
        ic % in_block // VNNI_GROUP,
        oc % VNNI_LANES,
        ic % VNNI_GROUP,
    ]
    np.testing.assert_array_equal(got, w)


def _conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Valid NCHW conv in int64 (stride 1)."""
    _, _, kh, kw = w.shape
    oh, ow = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", x[:, :, i : i + oh, j : j + ow], w[:, :, i, j])
    return out


@pytest.mark.parametrize("zero_point", [0, 1, 131, 255])
def test_zero_point_correction_makes_the_conv_of_u8_that_of_x_minus_zp(zero_point: int) -> None:
    """conv(x_q padded with zp, w) + correction == conv(x_q − zp padded with 0, w), exactly."""
    rng = np.random.default_rng(zero_point)
    w = rng.integers(-128, 128, (16, 8, 3, 3), dtype=np.int8)
    x = rng.integers(0, 256, (2, 8, 5, 6), dtype=np.uint8)
    correction = zero_point_correction(w, zero_point)
    assert correction.dtype == np.int32 and correction.shape == (1, 16, 1, 1)
    pads = ((0, 0), (0, 0), (1, 1), (2, 0))
    w64 = w.astype(np.int64)
    integer = _conv(np.pad(x, pads, constant_values=zero_point).astype(np.int64), w64)
    real = _conv(np.pad(x.astype(np.int64) - zero_point, pads), w64)
    np.testing.assert_array_equal(integer + correction, real)
    assert (np.abs(correction).max() > 0) == (zero_point != 0)
