"""Every test-model builder through the untuned compile path, against onnxruntime.

Two contracts per model: the ``.so`` that ``compile_untuned`` builds computes what onnxruntime
computes (``verify.compare`` tolerance), and ``extract_tasks`` links each Conv/Gemm/MatMul node to
exactly one task whose ``kind``/``op``/``description`` restate that node's attributes and shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from convtune.tuner.graph.extract import ANCHOR_OPS, ModelTask, extract_tasks
from convtune.tuner.graph.flops import static_shapes
from convtune.tuner.graph.ingest import IngestedModel, load_model
from convtune.tuner.library import compile_untuned
from convtune.tuner.measure.runtime import Artifact
from convtune.tuner.measure.verify import compare
from convtune.tuner.target import make_target
from tests import models


def residual_add_model(seed: int = 0) -> onnx.ModelProto:
    """Conv(4->4, 3x3, pad 1) + x: the ResNet skip connection (an elementwise Add)."""
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((4, 4, 3, 3)) * 0.2).astype(np.float32)
    nodes = [
        helper.make_node(
            "Conv", ["x", "W"], ["c"], name="conv0", kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Add", ["c", "x"], ["y"], name="add0"),
    ]
    return models.make_model(
        nodes,
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
        [onnx.numpy_helper.from_array(weight, "W")],
        name="residual",
    )


def twin_conv_model(seed: int = 0) -> onnx.ModelProto:
    """Two structurally identical Conv(4->4, 3x3, pad 1)+Relu layers: one task, two nodes."""
    rng = np.random.default_rng(seed)
    nodes, inits, previous = [], [], "x"
    for i in range(2):
        weight = (rng.standard_normal((4, 4, 3, 3)) * 0.2).astype(np.float32)
        inits.append(onnx.numpy_helper.from_array(weight, f"W{i}"))
        nodes.append(
            helper.make_node(
                "Conv",
                [previous, f"W{i}"],
                [f"c{i}"],
                name=f"conv{i}",
                kernel_shape=[3, 3],
                pads=[1, 1, 1, 1],
            )
        )
        previous = "y" if i == 1 else f"r{i}"
        nodes.append(helper.make_node("Relu", [f"c{i}"], [previous], name=f"relu{i}"))
    return models.make_model(
        nodes,
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
        name="twin",
    )


@dataclass(frozen=True)
class Case:
    build: Callable[[], onnx.ModelProto]
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)


CASES: dict[str, Case] = {
    "conv_bias_relu": Case(lambda: models.conv_net()),
    "conv_no_bias": Case(lambda: models.conv_net(bias=False, relu=False)),
    "conv_stride2": Case(lambda: models.conv_net(strides=2, size=15)),
    "conv_rect_kernel": Case(lambda: models.conv_net(kernel=(1, 3), pads=(0, 1, 0, 1), size=9)),
    "conv_grouped": Case(models.grouped_conv),
    "conv_depthwise": Case(models.depthwise_conv),
    "conv_dilated": Case(models.dilated_conv),
    "conv_asymmetric_pads": Case(models.asymmetric_pad_conv),
    "conv_constant_weights": Case(models.constant_weight_model),
    "twin_convs": Case(twin_conv_model),
    "three_conv_cnn": Case(lambda: models.three_conv_cnn()),
    "gemm_transB": Case(lambda: models.gemm_model()),
    "gemm_plain": Case(lambda: models.gemm_model(trans_b=False)),
    "gemm_transA": Case(lambda: models.gemm_model(trans_a=True, trans_b=False)),
    "gemm_transA_transB": Case(lambda: models.gemm_model(trans_a=True, trans_b=True)),
    "gemm_alpha_beta": Case(lambda: models.gemm_model(alpha=0.5, beta=2.0)),
    "gemm_no_bias": Case(lambda: models.gemm_model(bias=False, m=3, k=7, n=5)),
    "matmul": Case(lambda: models.matmul_model()),
    "matmul_batched": Case(lambda: models.matmul_model(batch=(2, 3))),
    "batchnorm": Case(models.batchnorm_model),
    "residual_add": Case(residual_add_model),
    "maxpool": Case(models.maxpool_model),
    "global_avgpool": Case(models.global_avgpool_model),
    "flatten": Case(models.flatten_model),
    "concat": Case(models.concat_model),
    "resize": Case(models.resize_model),
    "silu": Case(models.silu_model),
    "dynamic_reshape_batch1": Case(models.dynamic_reshape_model, {"x": (1, 3, 8, 8)}),
    "dynamic_reshape_batch3": Case(models.dynamic_reshape_model, {"x": (3, 3, 8, 8)}),
}


@pytest.fixture(scope="module")
def target():
    return make_target()


def _ingest(case: Case) -> tuple[onnx.ModelProto, IngestedModel]:
    model = case.build()
    return model, load_model(models.to_bytes(model), case.shapes or None)


@pytest.mark.parametrize("layout", ["nchw", "nchwc"])
@pytest.mark.parametrize("name", CASES)
def test_untuned_build_matches_onnxruntime(name: str, layout: str, target, tmp_path: Path) -> None:
    original, ingested = _ingest(CASES[name])
    feeds = models.random_inputs(original, {s.name: s.shape for s in ingested.inputs}, seed=1)
    so_path = compile_untuned(ingested, target, tmp_path, layout)
    ours = Artifact.load(so_path, [s.name for s in ingested.inputs]).run(feeds)
    # The reference runs the model as written (dynamic dims included), not our pinned copy.
    reference = [np.asarray(x) for x in models.run_onnxruntime(original, feeds)]
    assert [x.shape for x in ours] == [x.shape for x in reference]
    result = compare(ours, reference, [s.name for s in ingested.outputs], seed=1)
    assert result.passed, result


def _expected_description(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> dict:
    """What the task description must say about ``node``, from the ONNX attributes alone."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Conv":
        w = shapes[node.input[1]]
        spatial = len(w) - 2
        return {
            "input": list(shapes[node.input[0]]),
            "weight": list(w),
            "output": list(shapes[node.output[0]]),
            "strides": list(attrs.get("strides", [1] * spatial)),
            "pads": list(attrs.get("pads", [0] * 2 * spatial)),
            "dilations": list(attrs.get("dilations", [1] * spatial)),
            "groups": attrs.get("group", 1),
            "bias": len(node.input) > 2 and node.input[2] != "",
        }
    a, b = shapes[node.input[0]], shapes[node.input[1]]
    if node.op_type == "Gemm":
        trans_a, trans_b = attrs.get("transA", 0), attrs.get("transB", 0)
        return {
            "M": a[1] if trans_a else a[0],
            "N": b[0] if trans_b else b[1],
            "K": a[0] if trans_a else a[1],
            "transA": trans_a,
            "transB": trans_b,
            "alpha": pytest.approx(attrs.get("alpha", 1.0)),
            "beta": pytest.approx(attrs.get("beta", 1.0)),
            "bias": len(node.input) > 2 and node.input[2] != "",
        }
    return {"M": a[-2], "N": b[-1], "K": a[-1]}


def _tasks_of(name: str, tasks: list[ModelTask]) -> list[ModelTask]:
    return [task for task in tasks if name in task.onnx_nodes]


@pytest.mark.parametrize("layout", ["nchw", "nchwc"])
@pytest.mark.parametrize("name", CASES)
def test_anchor_nodes_link_to_one_task(name: str, layout: str, target) -> None:
    _, ingested = _ingest(CASES[name])
    _, tasks = extract_tasks(ingested, target, layout)
    shapes = static_shapes(ingested.model)
    anchors = [n for n in ingested.model.graph.node if n.op_type in ANCHOR_OPS]
    for node in anchors:
        linked = _tasks_of(node.name, tasks)
        assert len(linked) == 1, f"{node.name} linked to {[t.name for t in linked]}"
        task = linked[0]
        assert (task.kind, task.op) == (ANCHOR_OPS[node.op_type], node.op_type)
        expected = _expected_description(node, shapes)
        assert {k: task.description.get(k) for k in expected} == expected, node.name
    # Only anchor nodes are linked, and no task claims a node that is not in the model.
    linked_names = sorted(n for task in tasks for n in task.onnx_nodes)
    assert linked_names == sorted(n.name for n in anchors)


def test_identical_convs_share_one_task(target) -> None:
    _, ingested = _ingest(CASES["twin_convs"])
    _, tasks = extract_tasks(ingested, target)
    (task,) = [task for task in tasks if task.kind == "conv"]
    assert task.onnx_nodes == ["conv0", "conv1"]
    assert task.occurrences == 2
