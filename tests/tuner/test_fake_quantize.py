"""A quantize only its dequantize reads, as float arithmetic (tuner/graph/fake_quantize.py): the
same bits as the integer round trip, and the pairs it must leave alone."""

from __future__ import annotations

import numpy as np
import onnx
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.frontend.onnx import from_onnx
from tvm_ffi import structural_equal

from convtune.tuner.graph.fake_quantize import fake_quantize_pairs
from convtune.tuner.graph.reciprocal_quantize import legalize_quantize
from tests import models

SCALE, ZERO = 0.0412, 37
N = 4096


def _model(extra_reader: bool) -> onnx.ModelProto:
    """x → Q → DQ → y (a model output, as ResNet-50 QDQ ends); with ``extra_reader`` the 8-bit
    tensor is an output too."""
    inits = [
        numpy_helper.from_array(np.array([SCALE], np.float32), "s"),
        helper.make_tensor("z", TensorProto.UINT8, [1], [ZERO]),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N])]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("q", TensorProto.UINT8, [N]))
    return models.make_model(
        nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])], outputs, inits
    )


def _inputs() -> np.ndarray:
    """Values on every side of the clamp, and exactly halfway between two steps (where a
    rounding that differs would show)."""
    rng = np.random.default_rng(0)
    steps = np.arange(-300, 300, dtype=np.float32)
    halfway = (steps + np.float32(0.5)) * np.float32(SCALE)
    noise = rng.normal(0, 4, N - 2 * steps.size).astype(np.float32)
    return np.concatenate([halfway, steps * np.float32(SCALE), noise]).astype(np.float32)


def _run(mod: IRModule, x: np.ndarray) -> np.ndarray:
    mod = relax.transform.LegalizeOps({"relax.quantize": legalize_quantize})(mod)
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x))
    first = out[0] if isinstance(out, tvm.ir.Array) else out
    return first.numpy()


def test_the_pair_becomes_float_arithmetic_with_the_same_bits() -> None:
    mod = from_onnx(_model(extra_reader=False))
    rewritten, count = fake_quantize_pairs(mod)
    assert count == 1
    ops = set()
    relax.analysis.post_order_visit(
        rewritten["main"],
        lambda e: ops.add(str(e.op.name)) if isinstance(e, relax.Call) else None,
    )
    assert not ops & {"relax.quantize", "relax.dequantize"}, ops
    assert {"relax.round", "relax.maximum", "relax.minimum"} <= ops
    x = _inputs()
    before, after = _run(mod, x), _run(rewritten, x)
    assert before.dtype == after.dtype == np.float32
    np.testing.assert_array_equal(after, before)
    # Both clamps were reached, so the bounds are tested too.
    assert after.min() == np.float32(-ZERO) * np.float32(SCALE)
    assert after.max() == np.float32(255 - ZERO) * np.float32(SCALE)


def test_a_quantize_another_op_reads_is_left_alone() -> None:
    mod = from_onnx(_model(extra_reader=True))
    rewritten, count = fake_quantize_pairs(mod)
    assert count == 0
    assert structural_equal(rewritten, mod)
