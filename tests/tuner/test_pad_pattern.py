"""TVM's pattern of a pad corrected (tuner/graph/pad_pattern.py): it never follows a conv into
the conv's kernel, where no schedule computed its border."""

from __future__ import annotations

import numpy as np
from tvm import relax

from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.graph.pad_pattern import padding_is_not_elementwise
from convtune.tuner.target import make_target
from tests import models
from tests.tuner.test_layout_ops import pad_between_convs


def _patterns(call: relax.Expr, shape: tuple[int, ...]) -> dict[str, int]:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(call(x)))
        bb.emit_func_output(out)
    mod = relax.transform.AnnotateTIROpPattern()(relax.transform.LegalizeOps()(bb.get()))
    mod = padding_is_not_elementwise(mod)
    return {
        gvar.name_hint: int(func.attrs["op_pattern"])
        for gvar, func in mod.functions.items()
        if not isinstance(func, relax.Function)
    }


def test_a_pad_at_the_end_is_injective_an_elementwise_op_stays_elementwise() -> None:
    shape = (1, 2, 4, 4, 16)
    pad = _patterns(lambda x: relax.op.nn.pad(x, [0, 0, 0, 0, 0, 1, 0, 1, 0, 0]), shape)
    assert pad == {"pad": 2}  # TVM's analysis alone says 0, element-wise
    bias = relax.const(np.ones((1, 2, 1, 1, 16), np.float32))
    assert _patterns(lambda x: relax.op.add(x, bias), shape) == {"add": 0}
    assert _patterns(relax.op.nn.relu, shape) == {"relu": 0}


def test_a_conv_and_the_pad_after_it_are_two_tasks() -> None:
    """conv → ReLU → Pad (bottom, right) → conv: the pad was fused into the first conv's task
    (``fused_conv2d_NCHWc_add_relu_pad``), whose tuned schedules left the border unwritten."""
    ingested = load_model(models.to_bytes(pad_between_convs()))
    _, tasks = extract_tasks(ingested, make_target("llvm -mcpu=znver4 -num-cores=2"))
    names = [t.name for t in tasks]
    assert not [n for n in names if "conv2d" in n and "pad" in n], names
    assert any(n.startswith("pad") for n in names), names
