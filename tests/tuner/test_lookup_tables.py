"""Quantized activation chains as 256-entry tables (tuner/graph/lookup_tables.py): the table
against onnxruntime on every 8-bit input, and the chains it must leave alone."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

from convtune.tuner.graph.lookup_tables import lookup_tables
from tests import models

# Scales and zero points of the kind quantize_static picks for a SiLU after a conv.
X_SCALE, X_ZERO = 0.0537, 87
SIG_SCALE, SIG_ZERO = 1 / 255, 0
Y_SCALE, Y_ZERO = 0.0412, 7


def _qparam(name: str, scale: float, zero: int, dtype: int = TensorProto.UINT8) -> list:
    return [
        numpy_helper.from_array(np.array(scale, np.float32), f"{name}.s"),
        helper.make_tensor(f"{name}.z", dtype, [], [zero]),
    ]


def _chain_model(nodes: list[onnx.NodeProto], inits: list, inputs: list[str]) -> onnx.ModelProto:
    return models.make_model(
        nodes,
        [helper.make_tensor_value_info(n, TensorProto.UINT8, [256]) for n in inputs],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [256])],
        inits,
    )


def qdq_silu() -> onnx.ModelProto:
    """``q`` (u8) → DQ → x·sigmoid(x) with the sigmoid quantized between, → Q: YOLO's SiLU as
    ``quantize_static`` writes it."""
    inits = _qparam("x", X_SCALE, X_ZERO) + _qparam("sig", SIG_SCALE, SIG_ZERO)
    inits += _qparam("y", Y_SCALE, Y_ZERO)
    node = helper.make_node
    nodes = [
        node("DequantizeLinear", ["q", "x.s", "x.z"], ["x"]),
        node("Sigmoid", ["x"], ["sig"]),
        node("QuantizeLinear", ["sig", "sig.s", "sig.z"], ["sig_q"]),
        node("DequantizeLinear", ["sig_q", "sig.s", "sig.z"], ["sig_dq"]),
        node("Mul", ["x", "sig_dq"], ["m"]),
        node("QuantizeLinear", ["m", "y.s", "y.z"], ["y"]),
    ]
    return _chain_model(nodes, inits, ["q"])


def _tables(model: onnx.ModelProto) -> tuple[relax.Function, int]:
    mod, count = lookup_tables(from_onnx(model))
    return mod["main"], count


def _table_of(func: relax.Function) -> np.ndarray:
    found: list[np.ndarray] = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and str(getattr(expr.op, "name", "")) == "relax.take":
            found.append(expr.args[0].value.numpy())

    relax.analysis.post_order_visit(func, visit)
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("level", ["spec", "optimized"])
def test_the_silu_table_is_onnxruntimes_silu_on_every_input(level: str) -> None:
    model = qdq_silu()
    func, count = _tables(model)
    assert count == 1
    table = _table_of(func)
    assert table.dtype == np.uint8 and table.shape == (256,)
    options = ort.SessionOptions()
    if level == "spec":  # every QDQ op in fp32, as the ONNX spec defines them
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        models.to_bytes(model), options, providers=["CPUExecutionProvider"]
    )
    (expected,) = session.run(None, {"q": np.arange(256, dtype=np.uint8)})
    steps = np.abs(table.astype(np.int32) - expected.astype(np.int32))
    assert steps.max() <= 1, np.argwhere(steps > 1)
    assert np.count_nonzero(steps) <= 4, np.argwhere(steps)  # rounding ties only
    assert len(np.unique(table)) > 50  # a real activation, not a constant


def test_a_bare_requantization_is_left_alone() -> None:
    """Q(DQ(q)) at another scale costs a multiply and a round: no table."""
    inits = _qparam("x", X_SCALE, X_ZERO) + _qparam("y", Y_SCALE, Y_ZERO)
    nodes = [
        helper.make_node("DequantizeLinear", ["q", "x.s", "x.z"], ["x"]),
        helper.make_node("QuantizeLinear", ["x", "y.s", "y.z"], ["y"]),
    ]
    assert _tables(_chain_model(nodes, inits, ["q"]))[1] == 0


def test_a_chain_of_two_tensors_is_left_alone() -> None:
    """DQ(a) · sigmoid(DQ(b)): 65536 input pairs, not a 256-entry table."""
    inits = _qparam("x", X_SCALE, X_ZERO) + _qparam("y", Y_SCALE, Y_ZERO)
    node = helper.make_node
    nodes = [
        node("DequantizeLinear", ["a", "x.s", "x.z"], ["da"]),
        node("DequantizeLinear", ["b", "x.s", "x.z"], ["db"]),
        node("Sigmoid", ["db"], ["sb"]),
        node("Mul", ["da", "sb"], ["m"]),
        node("QuantizeLinear", ["m", "y.s", "y.z"], ["y"]),
    ]
    assert _tables(_chain_model(nodes, inits, ["a", "b"]))[1] == 0


def test_a_chain_with_an_op_without_a_table_is_left_alone() -> None:
    """Softmax reads its neighbours: not element by element."""
    inits = _qparam("x", X_SCALE, X_ZERO) + _qparam("y", SIG_SCALE, 0)
    node = helper.make_node
    nodes = [
        node("DequantizeLinear", ["q", "x.s", "x.z"], ["x"]),
        node("Softmax", ["x"], ["s"], axis=0),
        node("QuantizeLinear", ["s", "y.s", "y.z"], ["y"]),
    ]
    assert _tables(_chain_model(nodes, inits, ["q"]))[1] == 0
