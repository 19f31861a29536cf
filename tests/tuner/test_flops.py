"""FLOP counts checked against hand-derived formulas and onnxruntime's real output shapes."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from convtune.tuner.errors import InvalidModelError
from convtune.tuner.graph.flops import (
    conv_flops,
    conv_output_spatial,
    model_flops,
    node_flops,
    static_shapes,
)


def _conv(inputs, **attrs):
    return helper.make_node("Conv", inputs, ["y"], name="c", **attrs)


def test_conv_with_bias_counts_macs_twice_plus_bias():
    node = _conv(["x", "w", "b"], pads=[1, 1, 1, 1])
    shapes = {"x": (1, 3, 8, 8), "w": (4, 3, 3, 3), "b": (4,)}
    outputs = 1 * 4 * 8 * 8
    assert node_flops(node, shapes) == 2 * outputs * 3 * 3 * 3 + outputs


def test_depthwise_strided_dilated_conv():
    node = _conv(["x", "w"], group=16, strides=[2, 2], dilations=[2, 2], pads=[2, 2, 2, 2])
    shapes = {"x": (2, 16, 15, 15), "w": (16, 1, 3, 3)}
    # effective kernel 5, (15 + 4 - 5) // 2 + 1 = 8
    assert node_flops(node, shapes) == 2 * (2 * 16 * 8 * 8) * 1 * 9


def test_conv_flops_rejects_bad_groups():
    with pytest.raises(InvalidModelError, match="groups=3"):
        conv_flops(
            batch=1, in_channels=4, out_channels=6, out_spatial=(2, 2), kernel=(1, 1), groups=3
        )


@pytest.mark.parametrize(
    ("attrs", "x_hw", "k"),
    [
        ({"strides": [2, 3], "pads": [0, 1, 2, 0], "dilations": [1, 2]}, (17, 13), (3, 2)),
        ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, (15, 16), (3, 3)),
        ({"auto_pad": "VALID", "strides": [3, 1]}, (10, 9), (4, 2)),
    ],
)
def test_conv_output_shape_agrees_with_onnxruntime(attrs, x_hw, k):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((5, 2, *k)).astype(np.float32), "w")
    graph = helper.make_graph(
        [_conv(["x", "w"], **attrs)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 2, *x_hw))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    y = sess.run(None, {"x": rng.standard_normal((1, 2, *x_hw)).astype(np.float32)})[0]
    expected = conv_output_spatial(
        x_hw,
        k,
        strides=attrs.get("strides", [1, 1]),
        dilations=attrs.get("dilations", [1, 1]),
        pads=attrs.get("pads", [0] * 4),
        auto_pad=attrs.get("auto_pad", "NOTSET"),
    )
    assert y.shape[2:] == expected
    flops = node_flops(graph.node[0], {"x": (1, 2, *x_hw), "w": (5, 2, *k)})
    assert flops == 2 * np.prod(y.shape) * 2 * k[0] * k[1]


def test_gemm_transposes_and_beta_c():
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, beta=0.5)
    shapes = {"a": (7, 3), "b": (5, 7), "c": (5,)}  # A^T: 3×7, B^T: 7×5
    assert node_flops(node, shapes) == 2 * 3 * 5 * 7 + 2 * 3 * 5
    plain = helper.make_node("Gemm", ["a", "b"], ["y"])
    assert node_flops(plain, {"a": (3, 7), "b": (7, 5)}) == 2 * 3 * 5 * 7


def test_matmul_batched_broadcast_and_vectors():
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    assert node_flops(node, {"a": (2, 1, 4, 5), "b": (3, 5, 6)}) == 2 * 6 * 4 * 6 * 5
    assert node_flops(node, {"a": (5,), "b": (5, 6)}) == 2 * 6 * 5
    assert node_flops(node, {"a": (3, 4, 5), "b": (5,)}) == 2 * 3 * 4 * 5


def test_uncounted_op_is_zero_and_missing_shape_is_one_line_error():
    assert node_flops(helper.make_node("Relu", ["x"], ["y"]), {}) == 0.0
    with pytest.raises(InvalidModelError, match="no static shape for input 'x'"):
        node_flops(_conv(["x", "w"]), {"w": (1, 1, 1, 1)})


def test_model_flops_sums_per_node_and_op_type():
    rng = np.random.default_rng(1)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal((8 * 4 * 4, 10)).astype(np.float32), "m"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", strides=[2, 2], pads=[1] * 4),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Flatten", ["r"], ["f"], name="flat"),
        helper.make_node("MatMul", ["f", "m"], ["y"]),  # unnamed on purpose
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 8, 8))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    summary = model_flops(model)
    conv = 2 * 8 * 4 * 4 * 27
    matmul = 2 * 128 * 10
    assert summary.by_node == {"conv": conv, "MatMul_3": matmul}
    assert summary.by_op_type == {"Conv": conv, "MatMul": matmul}
    assert summary.total == conv + matmul
    assert static_shapes(onnx.shape_inference.infer_shapes(model))["f"] == (1, 128)
