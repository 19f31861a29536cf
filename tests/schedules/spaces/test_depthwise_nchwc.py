"""Depthwise convolutions in the blocked layout: op, weight packing and the depthwise space.

The blocked depthwise conv is checked against onnxruntime on the ONNX Conv it replaces (the
compute, the weight packing and the legalization), and every sketch of the space against the
unscheduled TIR of the same task (the same products summed in another order).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tvm
from onnx import numpy_helper
from tvm import relax, s_tir
from tvm.s_tir.meta_schedule import relax_integration
from tvm.target import Target

from convtune.schedules.ops.depthwise import (
    block_depthwise_weight,
    blocked_depthwise_conv2d,
    is_blockable_depthwise,
    is_blocked_depthwise,
    legalize_depthwise_conv2d,
)
from convtune.schedules.spaces.depthwise_nchwc import (
    SPACE_NAME,
    DepthwiseConvSpace,
    depthwise_sketches,
)
from convtune.schedules.spaces.registry import applicable, space_of
from convtune.tuner.graph.extract import RelaxModel, fuse
from convtune.tuner.target import make_target
from tests.models import conv_net
from tests.schedules.kernels import assert_close, random_args, run, tile_limits

LANES = 16

CONFIGS = {
    "3x3-s1": dict(in_channels=32, size=14),
    "3x3-s2-odd": dict(in_channels=32, size=15, strides=2),
    "5x5-s1-odd": dict(in_channels=16, size=9, kernel=5, pads=2),
    "5x5-s2-batch2": dict(batch=2, in_channels=48, size=13, kernel=5, pads=2, strides=2),
    "3x3-s1-batch2-no-bias": dict(batch=2, in_channels=16, size=7, bias=False, relu=False),
}


def _depthwise_onnx(config: dict) -> onnx.ModelProto:
    channels = config["in_channels"]
    return conv_net(out_channels=channels, group=channels, **config)


def _blocked_module(model: onnx.ModelProto) -> tvm.IRModule:
    """The model's one depthwise Conv (+ bias, ReLU) as a Relax function on blocked tensors,
    NCHW in and out, legalized."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in conv.attribute}
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    weight = inits[conv.input[1]]
    assert is_blockable_depthwise(shape, weight.shape, attrs["group"], LANES)

    # The attributes of the NCHW Relax conv2d a layout pass would see.
    conv_attrs = SimpleNamespace(
        strides=attrs["strides"],
        padding=list(attrs["pads"]),
        dilation=attrs.get("dilations", [1, 1]),
        groups=attrs["group"],
        out_dtype="float32",
    )
    to_blocked = lambda n, c, h, w: (n, c // LANES, h, w, c % LANES)  # noqa: E731
    to_nchw = lambda n, c, h, w, b: (n, c * LANES + b, h, w)  # noqa: E731
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.layout_transform(x, to_blocked))
            y = bb.emit(blocked_depthwise_conv2d(y, weight, conv_attrs, LANES))
            if len(conv.input) > 2:
                bias = inits[conv.input[2]].reshape(1, -1, 1, 1, LANES)
                y = bb.emit(relax.op.add(y, relax.const(bias.astype("float32"))))
            if any(n.op_type == "Relu" for n in model.graph.node):
                y = bb.emit(relax.op.nn.relu(y))
            out = bb.emit_output(relax.op.layout_transform(y, to_nchw))
        bb.emit_func_output(out)
    with make_target(None):
        return relax.transform.LegalizeOps({"relax.nn.conv2d": legalize_depthwise_conv2d})(bb.get())


def _depthwise_task(mod: tvm.IRModule) -> tvm.IRModule:
    fused = fuse(RelaxModel(mod))
    tasks = relax_integration.extract_tasks(fused, make_target(None))
    found = [t.dispatched[0] for t in tasks if is_blocked_depthwise(t.dispatched[0])]
    assert len(found) == 1
    return found[0]


def test_weight_packing_puts_the_lanes_of_one_tap_together():
    weight = np.arange(32 * 9, dtype=np.float32).reshape(32, 1, 3, 3)
    packed = block_depthwise_weight(weight, LANES)
    assert packed.shape == (2, 1, 3, 3, 1, LANES)
    for c in (0, 5, 17, 31):
        np.testing.assert_array_equal(packed[c // LANES, 0, :, :, 0, c % LANES], weight[c, 0])
    with pytest.raises(ValueError, match="depthwise"):
        block_depthwise_weight(np.zeros((24, 1, 3, 3), np.float32), LANES)


def test_only_channel_multiplier_one_with_divisible_channels_is_blockable():
    assert is_blockable_depthwise((1, 32, 8, 8), (32, 1, 3, 3), 32, LANES)
    assert not is_blockable_depthwise((1, 24, 8, 8), (24, 1, 3, 3), 24, LANES)  # 24 % 16
    assert not is_blockable_depthwise((1, 32, 8, 8), (64, 1, 3, 3), 32, LANES)  # multiplier 2
    assert not is_blockable_depthwise((1, 32, 8, 8), (32, 16, 3, 3), 2, LANES)  # grouped


@pytest.mark.parametrize("name", list(CONFIGS))
def test_blocked_depthwise_equals_onnxruntime(name: str) -> None:
    model = _depthwise_onnx(CONFIGS[name])
    x = np.random.default_rng(1).standard_normal(
        [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    )
    x = x.astype("float32")
    reference = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    vm = relax.VirtualMachine(tvm.compile(_blocked_module(model), make_target(None)), tvm.cpu())
    assert_close(vm["main"](tvm.runtime.tensor(x)).numpy(), reference)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_sketch_equals_the_unscheduled_kernel(name: str) -> None:
    task = _depthwise_task(_blocked_module(_depthwise_onnx(CONFIGS[name])))
    assert [s.name for s in applicable(task)] == ["generic", SPACE_NAME]
    args = random_args(task)
    reference = run(task, args)
    decisions = set()
    for seed in (1, 2):
        sketches = depthwise_sketches(s_tir.Schedule(task, seed=seed))
        assert len(sketches) == 2  # padding as its own pass, and inlined
        for sch in sketches:
            assert space_of(str(sch.trace)) == SPACE_NAME
            decisions.add(str(sch.trace.decisions))
            assert_close(run(sch.mod, args), reference)
    assert decisions  # the register block was sampled and recorded


def test_space_is_registered_and_applies_only_to_blocked_depthwise_tasks():
    space = DepthwiseConvSpace()
    assert space.seed_trials > 0
    dense = conv_net(in_channels=16, out_channels=16, size=8)
    with make_target(None):
        # A plain conv task (NCHW, legalized by TVM): not a depthwise one.
        mod = relax.transform.LegalizeOps()(relax.frontend.onnx.from_onnx(dense))
    tasks = relax_integration.extract_tasks(fuse(RelaxModel(mod)), make_target(None))
    assert tasks and not any(space.applies_to(t.dispatched[0]) for t in tasks)


def test_register_block_fits_the_targets_registers():
    task = _depthwise_task(_blocked_module(_depthwise_onnx(dict(in_channels=16, size=56))))
    for mcpu, limit in (("znver4", 28), ("znver3", 14)):
        target = Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
        assert max(tile_limits(DepthwiseConvSpace(), task, target)) == limit


def test_mobile_block_in_the_blocked_layout_matches_onnxruntime(tmp_path):
    """The layout pass blocks both depthwise convs and the Clip / squeeze-excitation / HardSwish
    ops around them, leaving only the model's input and output transforms, and the compiled
    model agrees with onnxruntime."""
    from convtune.tuner.graph.extract import extract_tasks
    from convtune.tuner.graph.ingest import load_model
    from convtune.tuner.library import compile_untuned
    from convtune.tuner.measure.runtime import Artifact
    from convtune.tuner.measure.verify import verify_artifact
    from tests.models import inverted_residual_net, to_bytes

    ingested = load_model(to_bytes(inverted_residual_net()))
    target = make_target(None)
    _, tasks = extract_tasks(ingested, target, "nchwc")
    depthwise = [t for t in tasks if is_blocked_depthwise(t.mod)]
    assert sorted(n for t in depthwise for n in t.onnx_nodes) == ["dw1", "dw2"]
    # Clip (ReLU6, TIR from the ONNX frontend) carried blocked and fused as the conv's epilogue.
    dw1 = next(t for t in depthwise if t.onnx_nodes == ["dw1"])
    assert dw1.name.endswith("maximum_minimum")
    so_path = compile_untuned(ingested, target, tmp_path)
    artifact = Artifact.load(so_path, [s.name for s in ingested.inputs])
    result = verify_artifact(artifact, ingested, threads=2)
    assert result.passed
