"""Constant folding of shape subgraphs: what folds, what must not, and TVM accepting the result."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from convtune.tuner.graph.fold import DEFAULT_MAX_ELEMENTS, fold_constants
from convtune.tuner.graph.ingest import load_model
from tests import models


def _vi(name, shape, elem_type=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem_type, shape)


def _pin_batch(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    pinned = onnx.ModelProto()
    pinned.CopyFrom(model)
    pinned.graph.input[0].type.tensor_type.shape.dim[0].dim_value = batch
    return pinned


def _initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _assert_same_outputs(original, folded, feeds):
    for want, got in zip(
        models.run_onnxruntime(original, feeds),
        models.run_onnxruntime(folded, feeds),
        strict=True,
    ):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batch", [1, 3])
def test_dynamic_reshape_subgraph_folds_to_a_constant_shape(batch):
    original = models.dynamic_reshape_model()
    folded = fold_constants(_pin_batch(original, batch))

    assert [n.name for n in folded.graph.node] == ["conv0", "relu0", "reshape0", "fc"]
    reshape = folded.graph.node[2]
    inits = _initializers(folded)
    np.testing.assert_array_equal(inits[reshape.input[1]], [batch, -1])
    # The scalars that only fed the shape computation are gone.
    assert not {"gather_idx", "unsq_axes", "minus_one"} & set(inits)
    out = folded.graph.output[0].type.tensor_type.shape
    assert [d.dim_value for d in out.dim] == [batch, 5]
    _assert_same_outputs(original, folded, models.random_inputs(original, {"x": (batch, 3, 8, 8)}))


def test_unpinned_shape_is_not_folded():
    folded = fold_constants(models.dynamic_reshape_model())
    ops = [n.op_type for n in folded.graph.node]
    assert ops == ["Conv", "Relu", "Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "Gemm"]


def _tvm_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import tvm
    import tvm.relax.frontend.onnx
    from tvm import relax

    mod = tvm.relax.frontend.onnx.from_onnx(model, keep_params_in_input=True)
    mod, params = relax.frontend.detach_params(mod)
    executable = relax.build(mod, target=tvm.target.Target({"kind": "llvm"}))
    vm = relax.VirtualMachine(executable, tvm.cpu())
    args = [tvm.runtime.tensor(feeds[vi.name]) for vi in model.graph.input]
    return vm["main"](*args, *params["main"]).numpy()


def test_tvm_frontend_refuses_the_unfolded_computed_reshape():
    import tvm.relax.frontend.onnx

    pinned = _pin_batch(models.dynamic_reshape_model(), 1)
    with pytest.raises(TypeError, match="Reshape"):
        tvm.relax.frontend.onnx.from_onnx(pinned, keep_params_in_input=True)


@pytest.mark.parametrize("batch", [1, 3])
def test_tvm_runs_the_folded_model_like_onnxruntime_runs_the_original(batch):
    original = models.dynamic_reshape_model()
    ingested = load_model(models.to_bytes(original), {"x": (batch, 3, 8, 8)})
    feeds = models.random_inputs(original, {"x": (batch, 3, 8, 8)}, seed=batch)
    want = models.run_onnxruntime(original, feeds)[0]
    got = _tvm_run(ingested.model, feeds)
    assert got.shape == (batch, 5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_constant_nodes_move_into_initializers_without_copies():
    original = models.constant_weight_model()
    constants = {
        n.output[0]: numpy_helper.to_array(n.attribute[0].t)
        for n in original.graph.node
        if n.op_type == "Constant"
    }
    folded = fold_constants(original)
    assert [n.name for n in folded.graph.node] == ["conv0"]
    inits = _initializers(folded)
    assert sorted(inits) == ["B", "W"]  # one tensor per constant, nothing duplicated
    for name, value in constants.items():
        np.testing.assert_array_equal(inits[name], value)
    _assert_same_outputs(original, folded, models.random_inputs(original))


def test_big_constant_computations_are_left_alone():
    rng = np.random.default_rng(0)
    big = rng.standard_normal((64, 128)).astype(np.float32)  # 8192 > DEFAULT_MAX_ELEMENTS
    small = rng.standard_normal((4, 64)).astype(np.float32)
    assert big.size > DEFAULT_MAX_ELEMENTS >= small.size
    nodes = [
        helper.make_node("Transpose", ["big"], ["big_t"], name="t_big"),
        helper.make_node("MatMul", ["x", "big_t"], ["h"], name="mm_big"),
        helper.make_node("Transpose", ["small"], ["small_t"], name="t_small"),
        helper.make_node("MatMul", ["h", "small_t"], ["y"], name="mm_small"),
    ]
    original = models.make_model(
        nodes,
        [_vi("x", [2, 128])],
        [_vi("y", [2, 4])],
        [numpy_helper.from_array(big, "big"), numpy_helper.from_array(small, "small")],
    )
    folded = fold_constants(original)
    assert [n.name for n in folded.graph.node] == ["t_big", "mm_big", "mm_small"]
    inits = _initializers(folded)
    assert sorted(inits) == ["big", "small_t"]
    np.testing.assert_array_equal(inits["small_t"], small.T)
    _assert_same_outputs(original, folded, models.random_inputs(original))


def test_shape_slices_and_size_fold():
    int64 = TensorProto.INT64
    nodes = [
        helper.make_node("Shape", ["x"], ["tail"], name="shape_tail", start=-2),
        helper.make_node("Concat", ["minus_one", "tail"], ["target"], name="cat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape"),
        helper.make_node("Size", ["x"], ["n"], name="size"),
        helper.make_node("Unsqueeze", ["n", "zero"], ["n1"], name="unsq"),
        helper.make_node("Reshape", ["x", "n1"], ["flat"], name="flatten"),
        helper.make_node("Shape", ["x"], ["mid"], name="shape_mid", start=1, end=-1),
    ]
    original = models.make_model(
        nodes,
        [_vi("x", [2, 3, 4, 5])],
        [_vi("y", [6, 4, 5]), _vi("flat", [120]), _vi("mid", [2], int64)],
        [
            numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
            numpy_helper.from_array(np.array([0], np.int64), "zero"),
        ],
    )
    folded = fold_constants(original)
    inits = _initializers(folded)
    np.testing.assert_array_equal(inits["target"], [-1, 4, 5])
    np.testing.assert_array_equal(inits["n1"], [120])
    # A folded graph output would disappear from the node list: that node stays.
    assert [n.name for n in folded.graph.node] == ["reshape", "flatten", "shape_mid"]
    _assert_same_outputs(original, folded, models.random_inputs(original))


def test_random_ops_are_never_folded():
    nodes = [
        helper.make_node("RandomNormal", [], ["noise"], name="rand", shape=[4], seed=1.0),
        helper.make_node("Add", ["x", "noise"], ["y"], name="add"),
    ]
    original = models.make_model(nodes, [_vi("x", [4])], [_vi("y", [4])])
    folded = fold_constants(original)
    assert [n.name for n in folded.graph.node] == ["rand", "add"]


def test_constants_used_only_inside_an_if_branch_survive():
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["t"], name="add_c")], "then", [], [_vi("t", [1, 4])]
    )
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"], name="neg")], "else", [], [_vi("e", [1, 4])]
    )
    nodes = [
        helper.make_node(
            "Constant",
            [],
            ["c"],
            name="const_c",
            value=numpy_helper.from_array(np.full((1, 4), 2.5, np.float32), "c"),
        ),
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
        helper.make_node(
            "If", ["cond"], ["y"], name="branch", then_branch=then_branch, else_branch=else_branch
        ),
    ]
    original = models.make_model(
        nodes,
        [_vi("x", [1, 4])],
        [_vi("y", [1, 4])],
        [numpy_helper.from_array(np.array(0, np.float32), "zero")],
    )
    folded = fold_constants(original)
    assert "c" in _initializers(folded)
    assert [n.name for n in folded.graph.node] == ["sum", "gt", "branch"]
    for sign in (1.0, -1.0):
        feeds = {"x": np.full((1, 4), sign, np.float32)}
        _assert_same_outputs(original, folded, feeds)


def test_input_model_is_not_modified():
    original = _pin_batch(models.dynamic_reshape_model(), 2)
    before = original.SerializeToString()
    fold_constants(original)
    assert original.SerializeToString() == before


def test_big_generated_constants_are_not_materialized():
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["zeros"], name="zeros"),
        helper.make_node("Add", ["x", "zeros"], ["y"], name="add"),
    ]
    huge = np.array([100_000, 100_000], np.int64)  # 40 GB if evaluated
    original = models.make_model(
        nodes,
        [_vi("x", [100_000, 100_000])],
        [_vi("y", [100_000, 100_000])],
        [numpy_helper.from_array(huge, "shape")],
    )
    folded = fold_constants(original)
    assert [n.name for n in folded.graph.node] == ["zeros", "add"]


def test_folding_iterates_until_shapes_downstream_become_static():
    # Float arithmetic on a shape is not data-propagated by ONNX shape inference, so the first
    # Reshape's output shape (and the second Shape) only become static after a first fold.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape0"),
        helper.make_node("Cast", ["s"], ["sf"], name="to_float", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["sf", "one"], ["sf1"], name="times_one"),
        helper.make_node("Cast", ["sf1"], ["si"], name="to_int", to=TensorProto.INT64),
        helper.make_node("ReduceProd", ["si"], ["n"], name="prod", keepdims=1),
        helper.make_node("Reshape", ["x", "n"], ["flat"], name="flatten"),
        helper.make_node("Shape", ["flat"], ["fs"], name="shape1"),
        helper.make_node("Concat", ["one_i", "fs"], ["target"], name="cat", axis=0),
        helper.make_node("Reshape", ["flat", "target"], ["y"], name="reshape"),
    ]
    original = models.make_model(
        nodes,
        [_vi("x", [2, 3, 4])],
        [_vi("y", [1, 24])],
        [
            numpy_helper.from_array(np.array(1.0, np.float32), "one"),
            numpy_helper.from_array(np.array([1], np.int64), "one_i"),
        ],
    )
    folded = fold_constants(original)
    assert [n.name for n in folded.graph.node] == ["flatten", "reshape"]
    np.testing.assert_array_equal(_initializers(folded)["target"], [1, 24])
    _assert_same_outputs(original, folded, models.random_inputs(original))


def test_a_folded_graph_output_stays_a_node_output():
    """A Shape that is itself a graph output folds to an Identity of its value: the frontend
    would return a shape, which no artifact can give back (ONNX's test_shape crashed)."""
    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Relu", ["x"], ["y"]),
        ],
        "g",
        [_vi("x", [2, 3])],
        [_vi("s", [2], TensorProto.INT64), _vi("y", [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folded = fold_constants(model)
    producer = next(n for n in folded.graph.node if n.output[0] == "s")
    assert producer.op_type == "Identity"
    np.testing.assert_array_equal(_initializers(folded)[producer.input[0]], [2, 3])
    x = np.ones((2, 3), np.float32)
    _assert_same_outputs(model, folded, {"x": x})
