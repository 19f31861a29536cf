"""The import normalizer (tuner/graph/normalize.py): each rewrite on the idiom it exists for,
checked by
onnxruntime, and the one-line refusal when a rewrite changes a model's outputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from convtune.tuner.errors import UnsupportedOpError
from convtune.tuner.graph import normalize as nz
from convtune.tuner.graph.ingest import load_model


def _model(nodes, inputs, outputs, inits=(), opset=17, ir_version=8) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in inits],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def _same_under_ort(a: onnx.ModelProto, b: onnx.ModelProto) -> bool:
    feeds = nz._seeded_feeds(a)
    reference = nz._ort_run(a, feeds)
    assert reference is not None
    return nz._same(reference, nz._ort_run(b, feeds))


def test_empty_resize_inputs_become_omitted() -> None:
    """PyTorch 1.x at opset 11: Resize(x, roi=[], scales=[], sizes)."""
    model = _model(
        [
            helper.make_node("Resize", ["x", "roi", "scales", "sizes"], ["y"], mode="linear"),
        ],
        [("x", [1, 2, 4, 4])],
        [("y", [1, 2, 8, 8])],
        [
            ("roi", np.zeros(0, np.float32)),
            ("scales", np.zeros(0, np.float32)),
            ("sizes", np.array([1, 2, 8, 8], np.int64)),
        ],
        opset=11,
    )
    out, applied = nz.normalize(model)
    resize = next(n for n in out.graph.node if n.op_type == "Resize")
    assert list(resize.input)[:3] == ["x", "", ""] and "resize" in applied
    assert _same_under_ort(model, out)


def test_old_opset_attribute_forms_are_upgraded() -> None:
    """Opset-9 Slice/Clip attributes and Upsample become input forms / Resize."""
    model = _model(
        [
            helper.make_node("Slice", ["x"], ["s"], axes=[2, 3], starts=[1, 1], ends=[-1, -1]),
            helper.make_node("Clip", ["s"], ["c"], min=0.0, max=1.0),
            helper.make_node("Upsample", ["c", "scales"], ["y"], mode="nearest"),
        ],
        [("x", [1, 2, 6, 6])],
        [("y", [1, 2, 8, 8])],
        [("scales", np.array([1, 1, 2, 2], np.float32))],
        opset=9,
        ir_version=4,
    )
    out, applied = nz.normalize(model)
    assert applied[0] == "opset" and nz._opset(out) == nz.TARGET_OPSET
    assert "Upsample" not in _ops(out) and "Resize" in _ops(out)
    slice_node = next(n for n in out.graph.node if n.op_type == "Slice")
    assert len(slice_node.input) >= 3 and not slice_node.attribute
    assert _same_under_ort(model, out)


def test_legacy_per_channel_prelu() -> None:
    """Opset 6: a 1-D slope was per channel; from opset 7 it would broadcast to the last axis."""
    slope = np.array([0.1, 0.2, 0.3], np.float32)
    model = _model(
        [helper.make_node("PRelu", ["x", "slope"], ["y"])],
        [("x", [2, 3, 4])],
        [("y", [2, 3, 4])],
        [("slope", slope)],
        opset=6,
        ir_version=3,
    )
    model.graph.input.append(helper.make_tensor_value_info("slope", TensorProto.FLOAT, [3]))
    ingested = load_model(model.SerializeToString())
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    got = nz._ort_run(ingested.model, {"x": x})
    assert got is not None
    np.testing.assert_allclose(got[0], np.where(x < 0, x * slope[None, :, None], x), rtol=1e-6)


def test_convtranspose_output_shape_becomes_pads() -> None:
    w = np.random.default_rng(0).standard_normal((1, 2, 3, 3)).astype(np.float32)
    model = _model(
        [
            helper.make_node(
                "ConvTranspose", ["x", "w"], ["y"], strides=[3, 2], output_shape=[10, 8]
            )
        ],
        [("x", [1, 1, 3, 3])],
        [("y", [1, 2, 10, 8])],
        [("w", w)],
    )
    out, applied = nz.normalize(model)
    conv = next(n for n in out.graph.node if n.op_type == "ConvTranspose")
    names = {a.name for a in conv.attribute}
    assert "output_shape" not in names and "pads" in names and applied == ["convtranspose"]
    assert _same_under_ort(model, out)


@pytest.mark.parametrize(("kernel", "bias"), [((2, 2), True), ((2, 2), False), ((3, 2), True)])
def test_an_unpooling_convtranspose_becomes_a_1x1_conv_and_a_pixel_shuffle(
    kernel: tuple[int, int], bias: bool
) -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 4, *kernel)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    inputs = ["x", "w", "b"] if bias else ["x", "w"]
    out_shape = [1, 4, 5 * kernel[0], 7 * kernel[1]]
    model = _model(
        [helper.make_node("ConvTranspose", inputs, ["y"], strides=list(kernel))],
        [("x", [1, 6, 5, 7])],
        [("y", out_shape)],
        [("w", w), ("b", b)] if bias else [("w", w)],
    )
    out, applied = nz.normalize(model)
    assert applied == ["subpixel-convtranspose"]
    ops = [n.op_type for n in out.graph.node]
    assert ops == ["Conv", "Reshape", "Transpose", "Reshape"]
    assert _same_under_ort(model, out)


@pytest.mark.parametrize(
    ("attrs", "kernel", "bias"),
    [
        ({"strides": [2, 2], "pads": [1, 1, 1, 1]}, [4, 4], True),  # a face detector's
        ({"strides": [2, 2]}, [3, 3], False),  # overlapping taps, no pads
        ({"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}, [3, 3], True),
        ({"strides": [1, 1], "pads": [1, 1, 1, 1]}, [3, 3], True),  # a flipped conv
        ({"strides": [3, 2], "pads": [2, 0, 1, 1]}, [5, 3], True),  # uneven, asymmetric
    ],
)
def test_a_convtranspose_becomes_a_conv_of_its_phases_a_shuffle_and_a_slice(
    attrs: dict, kernel: list[int], bias: bool
) -> None:
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 4, *kernel)).astype(np.float32)
    inits = [("w", w), ("b", rng.standard_normal(4).astype(np.float32))]
    model = _model(
        [helper.make_node("ConvTranspose", ["x", "w", "b"][: 3 if bias else 2], ["y"], **attrs)],
        [("x", [1, 6, 5, 7])],
        [("y", None)],
        inits if bias else inits[:1],
    )
    out, applied = nz.normalize(model)
    assert applied == ["subpixel-convtranspose"]
    ops = [n.op_type for n in out.graph.node]
    assert "ConvTranspose" not in ops and ops[0] == "Conv", ops
    assert _same_under_ort(model, out)


@pytest.mark.parametrize(
    "attrs",
    [
        {"strides": [2, 2], "group": 2},
        {"strides": [2, 2], "dilations": [2, 2]},
        {"strides": [3, 3]},  # a kernel narrower than the stride leaves gaps
    ],
)
def test_other_convtransposes_are_left_to_the_frontend(attrs: dict) -> None:
    kernel = [2, 2]
    groups = attrs.get("group", 1)
    w = np.random.default_rng(0).standard_normal((4, 4 // groups, *kernel)).astype(np.float32)
    model = _model(
        [helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)],
        [("x", [1, 4, 5, 5])],
        [("y", None)],
        [("w", w)],
    )
    out, applied = nz.normalize(model)
    assert "subpixel-convtranspose" not in applied
    assert [n.op_type for n in out.graph.node] == ["ConvTranspose"]


@pytest.mark.parametrize("bias", [True, False])
def test_a_classifier_conv_at_one_pixel_becomes_a_gemm(bias: bool) -> None:
    rng = np.random.default_rng(2)
    channels, classes = 1024, nz.GEMV_MIN_WEIGHTS // 1024
    inits = [
        ("w", rng.standard_normal((classes, channels, 1, 1)).astype(np.float32)),
        ("b", rng.standard_normal(classes).astype(np.float32)),
    ]
    model = _model(
        [
            helper.make_node("Conv", ["x", "w", "b"][: 3 if bias else 2], ["c"], name="fc"),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        [("x", [1, channels, 1, 1])],
        [("y", None)],
        inits if bias else inits[:1],
    )
    out, applied = nz.normalize(model)
    assert applied == ["pointwise-gemv"]
    assert _ops(out) == ["Reshape", "Gemm", "Reshape", "Relu"]
    assert next(n for n in out.graph.node if n.op_type == "Gemm").name == "fc"
    assert _same_under_ort(model, out)


@pytest.mark.parametrize(
    ("pixels", "channels", "classes"),
    [
        (2, 1024, 512),  # not one pixel
        (1, 960, 240),  # a squeeze-excitation bottleneck's weights: stays a conv
    ],
)
def test_other_pointwise_convs_stay_convs(pixels: int, channels: int, classes: int) -> None:
    w = np.random.default_rng(3).standard_normal((classes, channels, 1, 1)).astype(np.float32)
    model = _model(
        [helper.make_node("Conv", ["x", "w"], ["y"])],
        [("x", [1, channels, pixels, pixels])],
        [("y", None)],
        [("w", w)],
    )
    out, applied = nz.normalize(model)
    assert "pointwise-gemv" not in applied
    assert _ops(out) == ["Conv"]


@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization_is_lowered(p: int) -> None:
    model = _model(
        [helper.make_node("LpNormalization", ["x"], ["y"], axis=1, p=p)],
        [("x", [2, 3, 4])],
        [("y", [2, 3, 4])],
    )
    out, _ = nz.normalize(model)
    assert "LpNormalization" not in _ops(out)
    assert _same_under_ort(model, out)


def test_resize_at_a_non_integral_scale_keeps_onnx_coordinates() -> None:
    """0.6 of 4 is 2.4 → 2: TVM would sample with the ratio 2/4, ONNX with 0.6."""
    model = _model(
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")],
        [("x", [1, 1, 4, 4])],
        [("y", [1, 1, 2, 2])],
        [("scales", np.array([1, 1, 0.6, 0.6], np.float32))],
    )
    out, _ = nz.normalize(model)
    resize = next(n for n in out.graph.node if n.op_type == "Resize")
    attrs = {a.name: helper.get_attribute_value(a) for a in resize.attribute}
    assert attrs["coordinate_transformation_mode"] == b"tf_crop_and_resize"
    assert _same_under_ort(model, out)


def test_maxpool_indices_read_by_the_graph_are_refused_in_one_line() -> None:
    model = _model(
        [
            helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], name="pool"),
            helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
        ],
        [("x", [1, 1, 4, 4])],
        [("y", [1, 1, 3, 3]), ("f", [1, 1, 3, 3])],
    )
    with pytest.raises(UnsupportedOpError, match=r"^MaxPool node 'pool': its Indices") as info:
        nz.normalize(model)
    assert "\n" not in str(info.value)


def test_unread_maxpool_indices_are_dropped() -> None:
    model = _model(
        [helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2])],
        [("x", [1, 1, 4, 4])],
        [("y", [1, 1, 3, 3])],
    )
    out, _ = nz.normalize(model)
    assert list(out.graph.node[0].output) == ["y"]


def test_a_rewrite_that_changes_outputs_is_refused_naming_it(monkeypatch) -> None:
    def wrong(model: onnx.ModelProto) -> onnx.ModelProto:
        out = nz._copy(model)
        out.graph.node[0].op_type = "Sigmoid"
        return out

    monkeypatch.setattr(nz, "_REWRITES", (("opset", nz._upgrade_opset), ("broken", wrong)))
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", [1, 4])], [("y", [1, 4])])
    with pytest.raises(UnsupportedOpError, match="the import rewrite 'broken' changes"):
        nz.normalize(model)


def test_a_model_in_the_target_forms_is_left_alone() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", [1, 4])], [("y", [1, 4])])
    out, applied = nz.normalize(model)
    assert applied == [] and out is model


def test_tf2onnx_transposes_around_convs_cancel() -> None:
    """NHWC in, a Transpose to NCHW and back around each conv, bias Add and Relu in NHWC:
    only the Transposes at the boundaries remain."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(3):
        nodes += [
            helper.make_node("Transpose", [x], [f"t{i}"], perm=[0, 3, 1, 2]),
            helper.make_node("Conv", [f"t{i}", f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
            helper.make_node("Transpose", [f"c{i}"], [f"n{i}"], perm=[0, 2, 3, 1]),
            helper.make_node("Add", [f"n{i}", f"b{i}"], [f"a{i}"]),
            helper.make_node("Relu", [f"a{i}"], [f"r{i}"]),
        ]
        inits += [
            (f"w{i}", rng.standard_normal((4, 4, 3, 3)).astype(np.float32)),
            (f"b{i}", rng.standard_normal(4).astype(np.float32)),
        ]
        x = f"r{i}"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    model = _model(nodes, [("x", [1, 8, 8, 4])], [("y", [1, 8, 8, 4])], inits, opset=13)
    out, applied = nz.normalize(model)
    assert "transposes" in applied
    assert _ops(out).count("Transpose") == 2
    assert _same_under_ort(model, out)


def _nhwc_head(reduce_axes: list[int], keepdims: int, opset: int = 17) -> onnx.ModelProto:
    """A conv whose NCHW output tf2onnx transposes to NHWC, then a Relu and a Reduce of it."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    reduce_inputs, attrs, inits = ["r"], {"keepdims": keepdims}, [("w", w)]
    if opset >= 18:
        reduce_inputs.append("axes")
        inits.append(("axes", np.array(reduce_axes, dtype=np.int64)))
    else:
        attrs["axes"] = reduce_axes
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Relu", ["t"], ["r"]),
        helper.make_node("ReduceMean", reduce_inputs, ["y"], **attrs),
    ]
    full = [1, 6, 6, 8]
    out = [
        1 if i in reduce_axes else d for i, d in enumerate(full) if keepdims or i not in reduce_axes
    ]
    return _model(nodes, [("x", [1, 3, 6, 6])], [("y", out)], inits, opset=opset)


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_an_nhwc_global_mean_reduces_the_conv_output_before_any_transpose(
    keepdims: int, opset: int
) -> None:
    """tf2onnx's global average pool, ReduceMean over NHWC's H and W: the mean runs on the
    conv's NCHW output over axes 2 and 3, kept (the blocked layout reduces NCHWc in place), and
    the Transpose of the full map is gone; only reshapes of the small result remain."""
    model = _nhwc_head([1, 2], keepdims, opset)
    out, applied = nz.normalize(model)
    assert "transposes" in applied
    ops = _ops(out)
    assert "Transpose" not in ops, ops
    mean = next(n for n in out.graph.node if n.op_type == "ReduceMean")
    (relu,) = [n for n in out.graph.node if mean.input[0] in n.output]
    assert relu.op_type == "Relu" and list(relu.input) == ["c"]
    assert helper.get_attribute_value(next(a for a in mean.attribute if a.name == "keepdims")) == 1
    axes = (
        numpy_helper.to_array(next(i for i in out.graph.initializer if i.name == mean.input[1]))
        if opset >= 18
        else helper.get_attribute_value(next(a for a in mean.attribute if a.name == "axes"))
    )
    assert sorted(int(a) for a in axes) == [2, 3]
    assert _same_under_ort(model, out)


@pytest.mark.parametrize("keepdims", [0, 1])
def test_a_reduce_whose_kept_axes_change_order_keeps_a_transpose_of_its_small_result(
    keepdims: int,
) -> None:
    """A mean over NHWC's H alone leaves (N, W, C), which NCHW's order (N, C, W) is not: the
    Transpose moves after the mean, onto the reduced tensor."""
    model = _nhwc_head([1], keepdims)
    out, _ = nz.normalize(model)
    ops = _ops(out)
    assert ops.index("ReduceMean") < ops.index("Transpose"), ops
    assert _same_under_ort(model, out)


@pytest.mark.parametrize(
    ("shape", "perm", "reshaped"),
    [
        ([1, 8, 8, 1], [0, 3, 1, 2], True),  # grayscale NHWC input to NCHW
        ([1, 1, 5, 7], [0, 2, 3, 1], True),
        ([1, 8, 8, 2], [0, 3, 1, 2], False),  # a real move of the channels
        ([1, 8, 1, 4], [0, 3, 1, 2], False),  # 4 channels pass the 8 rows
    ],
)
def test_a_transpose_of_unit_axes_becomes_a_reshape(shape, perm, reshaped) -> None:
    out_shape = [shape[p] for p in perm]
    model = _model(
        [
            helper.make_node("Transpose", ["x"], ["t"], perm=perm),
            helper.make_node("Relu", ["t"], ["y"]),
        ],
        [("x", shape)],
        [("y", out_shape)],
    )
    out, applied = nz.normalize(model)
    assert ("unit-transposes" in applied) == reshaped
    assert ("Reshape" in _ops(out)) == reshaped and ("Transpose" in _ops(out)) != reshaped
    assert _same_under_ort(model, out)


def test_the_corpus_tf2onnx_cnn_keeps_no_transpose() -> None:
    """The corpus's tf2onnx export: the grayscale input's Transpose is a Reshape, those around
    each conv cancel, and the last one goes into the global mean."""
    from bench.corpus.legacy import tf2onnx_nhwc_cnn

    model = tf2onnx_nhwc_cnn()
    assert _ops(model).count("Transpose") == 14
    out, _ = nz.normalize(model)
    assert "Transpose" not in _ops(out), _ops(out)


@pytest.mark.parametrize(
    ("opset", "mask_read", "training", "identity"),
    [
        (9, False, None, True),  # a legacy export: ratio attribute, mask unread
        (13, False, False, True),
        (13, False, None, True),
        (13, True, None, False),  # the graph reads the mask
        (13, False, True, False),  # training mode: random, left alone
    ],
)
def test_an_inference_dropout_becomes_an_identity(opset, mask_read, training, identity) -> None:
    rng = np.random.default_rng(2)
    inputs, inits = ["h"], [("w", rng.standard_normal((16, 8)).astype(np.float32))]
    if opset >= 12:
        inputs.append("ratio")
        inits.append(("ratio", np.array(0.5, dtype=np.float32)))
        if training is not None:
            inputs.append("training")
            inits.append(("training", np.array(training)))
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Dropout", inputs, ["d", "mask"]),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    outputs = [("y", [1, 8])]
    if mask_read:
        nodes.append(helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT))
        outputs.append(("m", [1, 8]))
    model = _model(nodes, [("x", [1, 16])], outputs, inits, opset=opset)
    out, applied = nz.normalize(model, check=not training)
    assert ("dropout" in applied) == identity
    assert ("Dropout" in _ops(out)) != identity
    if not training:
        assert _same_under_ort(model, out)
