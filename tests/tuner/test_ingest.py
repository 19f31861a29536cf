"""Ingest: every refusal is one line naming the offending thing, with the right exception class."""

from __future__ import annotations

import hashlib
import io
import zipfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from convtune.tuner.errors import ConvtuneError, InvalidModelError, UnsupportedOpError
from convtune.tuner.graph.ingest import (
    MAX_INPUT_ELEMENTS,
    IngestedModel,
    TensorSpec,
    check_supported_ops,
    load_model,
    parse_input_shape,
)
from tests import models


def refused(error_class: type[ConvtuneError], *fragments: str):
    """Context manager: the block raises exactly ``error_class`` with a one-line message
    containing every fragment."""
    return _Refused(error_class, fragments)


class _Refused:
    def __init__(self, error_class: type[ConvtuneError], fragments: tuple[str, ...]) -> None:
        self.error_class = error_class
        self.fragments = fragments
        self.message = ""

    def __enter__(self) -> _Refused:
        self._raises = pytest.raises(ConvtuneError)
        self._info = self._raises.__enter__()
        return self

    def __exit__(self, *exc) -> bool:
        suppressed = self._raises.__exit__(*exc)
        err = self._info.value
        assert type(err) is self.error_class, f"{type(err).__name__}: {err}"
        self.message = str(err)
        assert self.message == err.message
        assert "\n" not in self.message and "\r" not in self.message, self.message
        assert len(self.message) < 500, self.message
        for fragment in self.fragments:
            assert fragment in self.message, (fragment, self.message)
        return suppressed


def _vi(name, shape, elem_type=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem_type, shape)


def _relu_model(x_shape, elem_type=TensorProto.FLOAT, **kwargs) -> onnx.ModelProto:
    node = helper.make_node("Relu", ["x"], ["y"], name="relu0")
    return models.make_model(
        [node], [_vi("x", x_shape, elem_type)], [_vi("y", x_shape, elem_type)], **kwargs
    )


# ---------------------------------------------------------------------------------------------
# happy paths
# ---------------------------------------------------------------------------------------------


BUILDERS = [
    models.conv_net,
    models.three_conv_cnn,
    models.gemm_model,
    models.matmul_model,
    models.constant_weight_model,
    models.grouped_conv,
    models.depthwise_conv,
    models.dilated_conv,
    models.asymmetric_pad_conv,
    models.batchnorm_model,
    models.maxpool_model,
    models.global_avgpool_model,
    models.flatten_model,
    models.concat_model,
    models.resize_model,
    models.silu_model,
]


@pytest.mark.parametrize("builder", BUILDERS, ids=lambda b: b.__name__)
def test_every_library_model_ingests_with_the_declared_shapes(builder):
    original = builder()
    ingested = load_model(models.to_bytes(original))
    assert {s.name: s.shape for s in ingested.inputs} == models.static_input_shapes(original)
    assert ingested.outputs[0].name == "y"
    expected = tuple(d.dim_value for d in original.graph.output[0].type.tensor_type.shape.dim)
    assert ingested.outputs[0].shape == expected
    assert all(s.dtype == "float32" for s in (*ingested.inputs, *ingested.outputs))


def test_load_from_path_records_original_bytes_and_file_stem(tmp_path):
    data = models.to_bytes(models.three_conv_cnn())
    path = tmp_path / "my_cnn.onnx"
    path.write_bytes(data)
    ingested = load_model(path)
    assert isinstance(ingested, IngestedModel)
    assert ingested.sha256 == hashlib.sha256(data).hexdigest()
    assert ingested.size_bytes == len(data)
    assert ingested.name == "my_cnn"
    assert load_model(str(path), name="custom").name == "custom"
    assert load_model(data).name == "cnn3"  # graph name when there is no file
    assert ingested.inputs == (TensorSpec("x", (1, 3, 16, 16), "float32"),)
    assert ingested.outputs == (TensorSpec("y", (1, 10), "float32"),)


def test_pinned_dynamic_model_is_folded_and_fully_shaped():
    data = models.to_bytes(models.dynamic_reshape_model())
    ingested = load_model(data, {"x": (3, 3, 8, 8)})
    ops = [n.op_type for n in ingested.model.graph.node]
    assert ops == ["Conv", "Relu", "Reshape", "Gemm"]
    assert ingested.outputs == (TensorSpec("y", (3, 5), "float32"),)
    # sha256 is of the upload, not of the rewritten model
    assert ingested.sha256 == hashlib.sha256(data).hexdigest()
    shaped = {vi.name for vi in ingested.model.graph.value_info}
    assert {"c", "r", "flat"} <= shaped


def test_symbol_pinned_on_one_input_pins_it_on_the_others():
    node = helper.make_node("Add", ["a", "b"], ["y"], name="add0")
    model = models.make_model(
        [node], [_vi("a", ["N", 4]), _vi("b", ["N", 4])], [_vi("y", ["N", 4])]
    )
    ingested = load_model(models.to_bytes(model), {"a": [2, 4]})
    assert [s.shape for s in ingested.inputs] == [(2, 4), (2, 4)]


def test_initializers_listed_as_inputs_are_not_inputs():
    model = models.conv_net()
    model.graph.input.extend([_vi("W", [6, 3, 3, 3]), _vi("B", [6])])  # IR<4 exporters do this
    ingested = load_model(models.to_bytes(model))
    assert [s.name for s in ingested.inputs] == ["x"]


def test_model_local_functions_are_inlined_and_accepted():
    func = helper.make_function(
        "my.funcs",
        "ReluTwice",
        ["a"],
        ["b"],
        [helper.make_node("Relu", ["a"], ["t"]), helper.make_node("Relu", ["t"], ["b"])],
        opset_imports=[helper.make_opsetid("", models.OPSET)],
    )
    node = helper.make_node("ReluTwice", ["x"], ["y"], name="f0", domain="my.funcs")
    graph = helper.make_graph([node], "fn", [_vi("x", [1, 4])], [_vi("y", [1, 4])])
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", models.OPSET), helper.make_opsetid("my.funcs", 1)],
        functions=[func],
    )
    model.ir_version = models.IR_VERSION
    ingested = load_model(models.to_bytes(model))
    assert [n.op_type for n in ingested.model.graph.node] == ["Relu", "Relu"]


# ---------------------------------------------------------------------------------------------
# not ONNX at all
# ---------------------------------------------------------------------------------------------


def test_empty_file():
    with refused(InvalidModelError, "not an ONNX model", "empty"):
        load_model(b"")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_bytes(seed):
    data = np.random.default_rng(seed).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    with refused(InvalidModelError, "not an ONNX model"):
        load_model(data)


@pytest.mark.parametrize("fraction", [0.01, 0.5, 0.99])
def test_truncated_file(fraction):
    data = models.to_bytes(models.three_conv_cnn())
    with refused(InvalidModelError, "not an ONNX model"):
        load_model(data[: int(len(data) * fraction)])


def test_zip_file():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("model.onnx", models.to_bytes(models.conv_net()))
    with refused(InvalidModelError, "not an ONNX model", "zip"):
        load_model(buffer.getvalue())


def test_text_file_that_parses_as_protobuf_garbage():
    with refused(InvalidModelError, "not an ONNX model"):
        load_model(b"\x08\x07")  # a valid ModelProto holding only ir_version=7


def test_missing_path_is_a_user_error(tmp_path):
    with refused(ConvtuneError, "cannot read model file", "nope.onnx"):
        load_model(tmp_path / "nope.onnx")


def test_graph_without_nodes():
    graph = helper.make_graph([], "hollow", [_vi("x", [1])], [_vi("x", [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", models.OPSET)])
    with refused(InvalidModelError, "graph 'hollow' has no nodes"):
        load_model(models.to_bytes(model))


def test_checker_failure_names_the_check():
    node = helper.make_node("Add", ["x", "ghost"], ["y"], name="add0")
    model = models.make_model([node], [_vi("x", [2])], [_vi("y", [2])], check=False)
    with refused(InvalidModelError, "onnx.checker", "ghost"):
        load_model(models.to_bytes(model))


def test_too_old_ir_version():
    model = _relu_model([1, 4])
    model.ir_version = 2
    with refused(InvalidModelError, "IR version 2"):
        load_model(models.to_bytes(model))


# ---------------------------------------------------------------------------------------------
# external data, dtypes
# ---------------------------------------------------------------------------------------------


def _externalize(tensor: TensorProto, location: str) -> None:
    tensor.ClearField("raw_data")
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location


def test_external_initializer_is_refused_without_reading_the_path(tmp_path):
    # The named file exists and holds valid weights: reading it would make the model work.
    weights = tmp_path / "weights.bin"
    weights.write_bytes(numpy_helper.to_array(models.conv_net().graph.initializer[0]).tobytes())
    model = models.conv_net()
    _externalize(model.graph.initializer[0], str(weights))
    with refused(InvalidModelError, "tensor 'W'", "external"):
        load_model(models.to_bytes(model))


def test_external_constant_attribute_is_refused():
    model = models.constant_weight_model()
    _externalize(model.graph.node[0].attribute[0].t, "/etc/passwd")
    with refused(InvalidModelError, "tensor 'W'", "external"):
        load_model(models.to_bytes(model))


def test_non_float32_input_is_refused():
    with refused(InvalidModelError, "input 'x'", "int64", "float32"):
        load_model(models.to_bytes(_relu_model([1, 4], TensorProto.INT64)))


@pytest.mark.parametrize(
    ("elem_type", "dtype_name"),
    [
        (TensorProto.FLOAT16, "float16"),
        (TensorProto.BFLOAT16, "bfloat16"),
        (TensorProto.FLOAT8E4M3FN, "float8e4m3fn"),
        (TensorProto.COMPLEX64, "complex64"),
        (TensorProto.STRING, "string"),
    ],
)
def test_refused_initializer_dtypes(elem_type, dtype_name):
    model = models.conv_net()
    odd = helper.make_tensor(
        "odd_weights", elem_type, [2], [b"a", b"b"] if elem_type == TensorProto.STRING else [1, 2]
    )
    model.graph.initializer.append(odd)
    with refused(InvalidModelError, "tensor 'odd_weights'", dtype_name):
        load_model(models.to_bytes(model))


def test_refused_dtype_in_constant_node():
    model = models.constant_weight_model()
    weight = model.graph.node[0].attribute[0].t
    half = numpy_helper.from_array(numpy_helper.to_array(weight).astype(np.float16), name="W")
    weight.CopyFrom(half)
    with refused(InvalidModelError, "'W'", "float16"):
        load_model(models.to_bytes(model))


def test_refused_dtype_found_only_by_shape_inference():
    nodes = [
        helper.make_node("Cast", ["x"], ["half"], name="to_half", to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["half"], ["y"], name="to_float", to=TensorProto.FLOAT),
    ]
    model = models.make_model(nodes, [_vi("x", [1, 4])], [_vi("y", [1, 4])])
    with refused(InvalidModelError, "tensor 'half'", "float16"):
        load_model(models.to_bytes(model))


# ---------------------------------------------------------------------------------------------
# ops
# ---------------------------------------------------------------------------------------------


def test_unsupported_standard_op():
    # (Celu, the op this test used first, is now lowered to Elu by tuner/graph/normalize.py.)
    node = helper.make_node("Det", ["x"], ["y"], name="bar")
    model = models.make_model([node], [_vi("x", [2, 2])], [_vi("y", [])])
    with refused(UnsupportedOpError, "op 'Det' (node 'bar') is not supported by the TVM ONNX"):
        load_model(models.to_bytes(model))


def _custom_op_model(op: str, domain: str) -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], ["y"], name="bar", domain=domain)
    graph = helper.make_graph([node], "custom", [_vi("x", [1, 4])], [_vi("y", [1, 4])])
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", models.OPSET), helper.make_opsetid(domain, 1)],
    )
    model.ir_version = models.IR_VERSION
    return model


def test_custom_domain_op_is_unsupported_even_with_a_known_name():
    # TVM's frontend ignores domains and would convert this as ai.onnx Relu.
    with refused(UnsupportedOpError, "op 'Relu' of domain 'my.ops' (node 'bar')"):
        check_supported_ops(_custom_op_model("Relu", "my.ops"))
    with refused(UnsupportedOpError, "'Foo'", "'my.ops'", "(node 'bar')"):
        load_model(models.to_bytes(_custom_op_model("Foo", "my.ops")))


def test_microsoft_contrib_ops_follow_the_frontend_table():
    check_supported_ops(_custom_op_model("FastGelu", "com.microsoft"))  # in the table
    with refused(UnsupportedOpError, "'QuickGelu' of domain 'com.microsoft'"):
        check_supported_ops(_custom_op_model("QuickGelu", "com.microsoft"))


def test_unsupported_op_inside_if_branch_and_all_offenders_listed():
    then_branch = helper.make_graph(
        [helper.make_node("Celu", ["x"], ["t"], name="inner")], "then", [], [_vi("t", [1, 4])]
    )
    else_branch = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["e"], name="inner2")], "else", [], [_vi("e", [1, 4])]
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
        helper.make_node(
            "If", ["cond"], ["m"], name="branch", then_branch=then_branch, else_branch=else_branch
        ),
        helper.make_node("LpNormalization", ["m"], ["y"], name="norm"),
    ]
    model = models.make_model(
        nodes,
        [_vi("x", [1, 4])],
        [_vi("y", [1, 4])],
        [numpy_helper.from_array(np.array(0, np.float32), "zero")],
    )
    with refused(UnsupportedOpError, "op 'LpNormalization' (node 'norm')", "'Celu'"):
        check_supported_ops(model)


# ---------------------------------------------------------------------------------------------
# input shapes
# ---------------------------------------------------------------------------------------------


def test_dynamic_dim_must_be_pinned_exact_message():
    model = models.conv_net(batch="N", size=224)
    with refused(InvalidModelError) as check:
        load_model(models.to_bytes(model))
    assert check.message == (
        "input 'x' has a dynamic dimension 'N' (shape [N,3,224,224]); "
        "pin it with --input-shape x=1,3,224,224"
    )


def test_dynamic_image_size_is_not_guessed_and_the_api_names_its_field():
    """A dynamic H and W get no 1×1 suggestion; an HTTP client is told about its form field."""
    model = _relu_model([1, 3, "H", "W"])
    with refused(InvalidModelError) as check:
        load_model(models.to_bytes(model), shape_option="input_shapes")
    assert check.message == (
        "input 'x' has a dynamic dimension 'H' (shape [1,3,H,W]); pin it with "
        "input_shapes x=1,3,H,W with H, W set to the size to tune for"
    )
    assert "--" not in check.message


def test_unnamed_dynamic_dim():
    model = _relu_model([None, 4])
    with refused(InvalidModelError, "input 'x'", "dynamic dimension '?'", "x=1,4"):
        load_model(models.to_bytes(model))


def test_unknown_rank_input():
    node = helper.make_node("Relu", ["x"], ["y"], name="relu0")
    model = models.make_model([node], [_vi("x", None)], [_vi("y", [2, 3])], check=False)
    with refused(InvalidModelError, "input 'x' has unknown rank", "--input-shape"):
        load_model(models.to_bytes(model))
    assert load_model(models.to_bytes(model), {"x": (2, 3)}).inputs[0].shape == (2, 3)


def test_override_for_unknown_input_lists_valid_inputs():
    data = models.to_bytes(models.dynamic_reshape_model())
    with refused(InvalidModelError, "unknown input 'input'", "inputs are: 'x'"):
        load_model(data, {"input": (1, 3, 8, 8)})


def test_override_rank_mismatch():
    data = models.to_bytes(models.dynamic_reshape_model())
    with refused(InvalidModelError, "rank 3", "input 'x' has rank 4", "[N,3,8,8]"):
        load_model(data, {"x": (1, 3, 8)})


def test_override_conflicting_with_fixed_dim():
    data = models.to_bytes(models.dynamic_reshape_model())
    with refused(InvalidModelError, "conflicts with input 'x'", "dim 1", "4 != 3"):
        load_model(data, {"x": (1, 4, 8, 8)})


@pytest.mark.parametrize("bad", [(0, 3, 8, 8), (-1, 3, 8, 8)])
def test_override_must_be_positive(bad):
    data = models.to_bytes(models.dynamic_reshape_model())
    with refused(InvalidModelError, "positive"):
        load_model(data, {"x": bad})


def test_huge_pinned_shape_is_capped():
    data = models.to_bytes(models.dynamic_reshape_model())
    batch = 10**12 // (3 * 8 * 8)
    with refused(InvalidModelError, "input 'x'", str(batch * 192), str(MAX_INPUT_ELEMENTS)):
        load_model(data, {"x": (batch, 3, 8, 8)})


def test_huge_declared_fixed_shape_is_capped():
    with refused(InvalidModelError, "input 'x'", "elements"):
        load_model(models.to_bytes(_relu_model([100000, 100000])))


def test_shape_inconsistency_is_one_line():
    node = helper.make_node("Add", ["a", "b"], ["y"], name="add0")
    model = models.make_model(
        [node], [_vi("a", [1, 4]), _vi("b", [1, 5])], [_vi("y", [1, 4])], check=False
    )
    with refused(InvalidModelError, "shape inference failed", "add0", "Incompatible dimensions"):
        load_model(models.to_bytes(model))


def test_names_with_newlines_stay_on_one_line():
    model = _relu_model(["N", 4])
    model.graph.input[0].name = "evil\nname"
    model.graph.node[0].input[0] = "evil\nname"
    with refused(InvalidModelError, "'evil\\nname'"):
        load_model(models.to_bytes(model))


# ---------------------------------------------------------------------------------------------
# parse_input_shape
# ---------------------------------------------------------------------------------------------


def test_parse_input_shape():
    assert parse_input_shape("input=1,3,224,224") == ("input", (1, 3, 224, 224))
    assert parse_input_shape(" x = 2, 3 ") == ("x", (2, 3))
    assert parse_input_shape("a=b=4") == ("a=b", (4,))


@pytest.mark.parametrize("text", ["input", "=1,3", "x=", "x=1,,3", "x=1,0", "x=1,-3", "x=1.5"])
def test_parse_input_shape_rejects(text):
    with refused(ConvtuneError, "--input-shape"):
        parse_input_shape(text)


@pytest.mark.parametrize(
    "builder", [*BUILDERS, models.dynamic_reshape_model], ids=lambda b: b.__name__
)
def test_every_ingested_library_model_converts_with_the_tvm_frontend(builder):
    import tvm.relax.frontend.onnx

    original = builder()
    shapes = {"x": (2, 3, 8, 8)} if builder is models.dynamic_reshape_model else None
    ingested = load_model(models.to_bytes(original), shapes)
    mod = tvm.relax.frontend.onnx.from_onnx(ingested.model, keep_params_in_input=True)
    main = mod["main"]
    assert int(main.attrs["num_input"]) == len(ingested.inputs)
    # Static output shapes all the way through: what MetaSchedule task extraction needs.
    assert tuple(int(d) for d in main.ret_ty.shape.values) == ingested.outputs[0].shape


def test_a_negative_dim_is_dynamic_and_takes_an_override():
    """PaddlePaddle exports write -1 for a dynamic size (rapidocr's cls model): an override
    pins it, and without one the error asks for it like for a named symbol."""
    model = models.conv_net(in_channels=3, out_channels=4, size=8)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -1
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = -1
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = -1
    ingested = load_model(models.to_bytes(model), input_shapes={"x": (1, 3, 8, 8)})
    assert ingested.inputs[0].shape == (1, 3, 8, 8)
    with refused(InvalidModelError, "dynamic dimension"):
        load_model(models.to_bytes(model))
