"""The benchmark zoo: published FLOP/structure figures, finite outputs, reproducible bytes."""

import hashlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bench import zoo


def test_resnet50_v15_matches_published_figures():
    info = zoo.describe(onnx.load(zoo.zoo_model("resnet50")))
    assert info["conv"] == 53
    assert info["gemm"] == 1
    assert info["unique_workloads"] == 24
    assert info["gflop"] == pytest.approx(8.18, rel=0.01)


def test_resnet50_v15_puts_the_stride_on_the_3x3_conv():
    model = onnx.load(zoo.zoo_model("resnet50"))
    strided = {
        n.name: dict((a.name, list(a.ints)) for a in n.attribute)
        for n in model.graph.node
        if n.op_type == "Conv" and any(a.name == "strides" and a.ints[0] == 2 for a in n.attribute)
    }
    assert sorted(strided) == sorted(
        ["conv1"] + [f"layer{s}.0.{c}" for s in (2, 3, 4) for c in ("conv2", "downsample")]
    )
    assert all(strided[f"layer{s}.0.conv2"]["kernel_shape"] == [3, 3] for s in (2, 3, 4))


def test_resnet50_output_is_finite_and_well_scaled_under_onnxruntime():
    sess = ort.InferenceSession(str(zoo.zoo_model("resnet50")), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal(zoo.INPUT_SHAPE).astype(np.float32)
    (y,) = sess.run(None, {zoo.INPUT_NAME: x})
    assert y.shape == (1, zoo.NUM_CLASSES)
    assert np.isfinite(y).all()
    # Neither exploded nor collapsed to a constant: BN statistics keep activations O(1).
    assert 0.1 < float(y.std()) < 100.0


def test_generation_is_byte_identical(tmp_path, monkeypatch):
    first = zoo.zoo_model("resnet50")
    monkeypatch.setattr(zoo, "CACHE_DIR", tmp_path)
    second = zoo.zoo_model("resnet50")
    assert second.parent == tmp_path
    assert (
        hashlib.sha256(first.read_bytes()).digest() == hashlib.sha256(second.read_bytes()).digest()
    )
    assert zoo.zoo_model("resnet50") == second  # cached path reused


def test_small_models_structure():
    r18 = zoo.describe(zoo.resnet18())
    assert (r18["conv"], r18["gemm"]) == (20, 1)
    assert r18["gflop"] == pytest.approx(3.64, rel=0.01)
    mb = zoo.describe(zoo.mobilenetv2())
    assert (mb["conv"], mb["gemm"]) == (52, 1)
    assert mb["gflop"] == pytest.approx(0.60, rel=0.02)


def _ops(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in model.graph.node}


def _depthwise_kernels(model: onnx.ModelProto) -> set[int]:
    """Kernel sizes of the depthwise Convs (group > 1)."""
    sizes = set()
    for node in model.graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Conv" and attrs.get("group", 1) > 1:
            sizes.add(attrs["kernel_shape"][0])
    return sizes


@pytest.mark.parametrize(
    ("name", "gflop", "convs"),
    # torchvision: EfficientNet-B0 0.39 GMAC, MobileNetV3-Large 0.22 GMAC (2 FLOP per MAC).
    [("efficientnet_b0", 0.77, 81), ("mobilenetv3", 0.43, 63)],
)
def test_mobile_models_structure_and_outputs(name, gflop, convs):
    model = onnx.load(zoo.zoo_model(name))
    info = zoo.describe(model)
    assert (info["conv"], info["gemm"]) == (convs, 1)
    assert info["gflop"] == pytest.approx(gflop, rel=0.03)
    # What sets them apart from MobileNetV2: squeeze-excitation, their activations, 5×5 depthwise.
    assert {"GlobalAveragePool", "Mul"} <= _ops(model)
    assert _depthwise_kernels(model) == {3, 5}
    expected = {"Sigmoid"} if name == "efficientnet_b0" else {"HardSwish", "HardSigmoid"}
    assert expected <= _ops(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal(zoo.INPUT_SHAPE).astype(np.float32)
    (y,) = sess.run(None, {zoo.INPUT_NAME: x})
    assert y.shape == (1, zoo.NUM_CLASSES) and np.isfinite(y).all()
    assert 0.01 < float(y.std()) < 100.0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["efficientnet_b0", "mobilenetv3"])
def test_mobile_models_compile_and_match_onnxruntime(name, tmp_path):
    """TVM converts them (HardSwish, HardSigmoid, SE Mul), and the untuned build agrees with
    onnxruntime within the verification tolerance."""
    from convtune.tuner.graph.ingest import load_model
    from convtune.tuner.library import compile_untuned
    from convtune.tuner.measure.runtime import Artifact
    from convtune.tuner.measure.verify import verify_artifact
    from convtune.tuner.target import make_target

    ingested = load_model(zoo.zoo_model(name))
    so_path = compile_untuned(ingested, make_target(None), tmp_path)
    artifact = Artifact.load(so_path, [s.name for s in ingested.inputs])
    result = verify_artifact(artifact, ingested, threads=2)  # raises on a mismatch
    assert result.passed and result.max_abs_err < 1e-2


def test_unknown_model_name():
    with pytest.raises(KeyError, match="resnet50"):
        zoo.zoo_model("vgg16")
