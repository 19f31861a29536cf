"""QuantizeLinear lowered with the reciprocal of its scale (tuner/graph/reciprocal_quantize.py):
no division per element, and the values of onnxruntime's definition up to a tie's step."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from convtune.tuner.graph.reciprocal_quantize import legalize_quantize


def _quantize_module(shape: tuple[int, ...], axis: int, per_channel: bool, out_dtype: str):
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    channels = shape[axis] if per_channel else 1
    rng = np.random.default_rng(0)
    scale = rng.uniform(0.01, 0.1, channels).astype(np.float32)
    zero = rng.integers(0, 20, channels).astype(out_dtype)
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        scale_arg = relax.const(scale if per_channel else scale[:1])
        zero_arg = relax.const(zero if per_channel else zero[:1])
        y = bb.emit(relax.op.quantize(x, scale_arg, zero_arg, axis, out_dtype))
        bb.emit_func_output(y)
    mod = relax.transform.LegalizeOps({"relax.quantize": legalize_quantize})(bb.get())
    return mod, scale, zero


@pytest.mark.parametrize(
    ("per_channel", "out_dtype"), [(False, "uint8"), (True, "uint8"), (True, "int8")]
)
def test_quantize_multiplies_by_the_reciprocal_and_matches_the_definition(
    per_channel: bool, out_dtype: str
) -> None:
    shape, axis = (1, 8, 6, 5), 1
    mod, scale, zero = _quantize_module(shape, axis, per_channel, out_dtype)
    text = mod.script()
    assert "* (T.float32(1.0) / " in text, "x times the reciprocal of the scale"
    assert text.count(" / ") == 1, "the scale's reciprocal is the only division"
    exe = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(exe, tvm.cpu())
    x = np.random.default_rng(1).normal(0, 4, shape).astype(np.float32)
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    s = scale.reshape(1, -1, 1, 1) if per_channel else scale[0]
    z = zero.reshape(1, -1, 1, 1).astype(np.float32) if per_channel else np.float32(zero[0])
    info = np.iinfo(out_dtype)
    expected = np.clip(np.round(x / s) + z, info.min, info.max).astype(out_dtype)
    steps = np.abs(got.astype(np.int32) - expected.astype(np.int32))
    assert steps.max() <= 1, "a tie may round the other way, by one step"
    assert np.mean(steps == 0) > 0.999
    assert len(np.unique(got)) > 32, "not all clamped"
