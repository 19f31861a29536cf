"""The int8-vnni space: u8×s8→s32 convs tensorized with ``vpdpbusd`` (schedules/ops/int8.py,
schedules/ops/vnni.py, schedules/spaces/int8_vnni.py).

A kernel is the TE conv of the op with a requantizing epilogue (cast, per-channel scale, round,
zero point, clamp to u8), scheduled for each output-channel block and compared exactly with a
numpy int64 reference: the integer sums are exact, and the epilogue is the same fp32 arithmetic.
Running needs AVX-512 VNNI on the host; the assembly is checked for Zen 4 on any host.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import onnx
import pytest
import tvm
from tvm import te
from tvm import tirx as tir
from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo

from bench.qdq import quantize_qdq
from convtune.schedules.lowering.pipeline import use_convtune_lowering
from convtune.schedules.ops.int8 import (
    INT8_CONV_BLOCK,
    VNNI_GROUP,
    VNNI_LANES,
    conv2d_nchwc_int8,
    pack_weight,
)
from convtune.schedules.ops.isa import has_vnni
from convtune.schedules.ops.nchwc import is_blocked_conv
from convtune.schedules.spaces.int8_vnni import OC_BLOCKS, Int8VnniConvSpace, schedule_int8_conv
from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.target import make_target
from tests.models import conv_net, silu_model, to_bytes
from tests.schedules.dot_conv_cases import (
    from_blocked,
    random_task_args,
    reference_conv,
    to_blocked,
    with_each_column_block,
)
from tests.schedules.kernels import AVX512, conv_task, run

needs_vnni = pytest.mark.skipif(
    not has_vnni(make_target(None)), reason="the host CPU has no AVX-512 VNNI (vpdpbusd)"
)

#: (in channels, out channels, input block, size, kernel, stride, pads top/left/bottom/right)
CONFIGS = {
    "3x3-pad1": (32, 64, 16, 10, 3, 1, (1, 1, 1, 1)),
    "stride2": (16, 48, 16, 15, 3, 2, (1, 1, 1, 1)),
    "1x1": (64, 32, 16, 7, 1, 1, (0, 0, 0, 0)),
    "in-block-8": (24, 32, 8, 9, 3, 1, (1, 1, 1, 1)),
    "asymmetric-pads": (16, 64, 16, 9, 3, 1, (0, 1, 2, 1)),
    # an RGB stem's data: one 4-channel chunk, one vpdpbusd group a pixel
    "stem-7x7-stride2": (4, 32, 4, 20, 7, 2, (3, 3, 3, 3)),
}
#: The requantization's output zero point.
ZERO_POINT = 100


def tile_shape(oc: int, ic: int, block: int, kernel: int) -> tuple[int, ...]:
    """The 7-D weight of the compute: (O/16, I/a, KH, KW, a/4, 16, 4)."""
    groups = block // VNNI_GROUP
    return (oc // VNNI_LANES, ic // block, kernel, kernel, groups, VNNI_LANES, VNNI_GROUP)


def int8_conv_func(ic: int, oc: int, block: int, size: int, kernel: int, stride: int, pads):
    """u8 NCHW{block}c data, the 7-D weight tile, the op's conv and an epilogue that scales by
    channel and quantizes to u8 (two blocks, as a task's epilogue is several)."""
    data = te.placeholder((1, ic // block, size, size, block), "uint8", name="data")
    weight = te.placeholder(tile_shape(oc, ic, block, kernel), "int8", name="weight")
    scale = te.placeholder((oc // VNNI_LANES, VNNI_LANES), "float32", name="scale")
    conv = conv2d_nchwc_int8(data, weight, (stride, stride), pads, (1, 1))
    scaled = te.compute(
        conv.shape,
        lambda n, c, h, w, b: conv[n, c, h, w, b].astype("float32") * scale[c, b],
        name="scaled",
    )

    def requantize(n, c, h, w, b):
        value = te.round(scaled[n, c, h, w, b]) + tir.const(ZERO_POINT, "float32")
        clamped = te.max(te.min(value, tir.const(255, "float32")), tir.const(0, "float32"))
        return clamped.astype("uint8")

    out = te.compute(conv.shape, requantize, name="requantized")
    return IRModule({"main": te.create_prim_func([data, weight, scale, out])})


def case(name: str, seed: int = 0):
    """The TE module, its arguments and the expected u8 output (NCHW) of ``CONFIGS[name]``."""
    ic, oc, block, size, kernel, stride, pads = CONFIGS[name]
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (1, ic, size, size), dtype=np.uint8)
    w = rng.integers(-128, 128, (oc, ic, kernel, kernel), dtype=np.int8)
    acc = reference_conv(x, w, stride, pads)
    assert np.abs(acc).max() < 2**31
    # Scaled so the outputs spread over the u8 range: about ±50 around the zero point.
    scale = (rng.uniform(0.5, 1.5, oc) * 50 / acc.std()).astype(np.float32)
    scaled = acc.astype(np.float32) * scale.reshape(1, -1, 1, 1)
    expected = np.clip(np.round(scaled) + np.float32(ZERO_POINT), 0, 255).astype(np.uint8)
    packed = pack_weight(w, block).reshape(tile_shape(oc, ic, block, kernel))
    out = np.zeros((1, oc // VNNI_LANES, *expected.shape[2:], VNNI_LANES), np.uint8)
    args = [to_blocked(x, block), packed, scale.reshape(-1, VNNI_LANES), out]
    mod = int8_conv_func(ic, oc, block, size, kernel, stride, pads)
    return mod, args, expected


def test_the_reference_is_the_unscheduled_kernel() -> None:
    """The layouts, the packing and the epilogue of :func:`case` describe the op: its
    unscheduled TIR computes the reference (on any x86 host: no VNNI instruction)."""
    mod, args, expected = case("asymmetric-pads")
    got = from_blocked(run(mod, args))
    np.testing.assert_array_equal(got, expected)
    # Not a degenerate case: most outputs are neither clamped nor the zero point.
    assert len(np.unique(got)) > 64 and np.mean((got == 0) | (got == 255)) < 0.1


@needs_vnni
@pytest.mark.parametrize("name", list(CONFIGS))
def test_vnni_kernel_equals_the_integer_reference(name: str) -> None:
    mod, args, expected = case(name)
    chunks = args[-1].shape[1]
    blocks = [c for c in OC_BLOCKS if chunks % c == 0]
    assert blocks
    for oc_inner in blocks:
        for columns, scheduled in with_each_column_block(mod, schedule_int8_conv, oc_inner):
            np.testing.assert_array_equal(
                from_blocked(run(scheduled, args)), expected, err_msg=f"{oc_inner=} {columns=}"
            )


@pytest.mark.parametrize("oc_inner", OC_BLOCKS)
def test_the_kernel_is_vpdpbusd_on_zmm(oc_inner: int) -> None:
    """Compiled for Zen 4 (on any host): the reduction is ``vpdpbusd`` on 512-bit registers,
    at least one per accumulator chunk of the unrolled block."""
    mod, _, _ = case("3x3-pad1")
    sch = Schedule(mod, seed=1)
    schedule_int8_conv(sch, oc_inner)
    use_convtune_lowering()
    asm = tvm.compile(sch.mod, target=make_target(AVX512)).mod.inspect_source("asm")
    dots = re.findall(r"^\s*vpdpbusd\s+(.*)$", asm, re.MULTILINE)
    assert len(dots) >= oc_inner, dots
    assert all("%zmm" in operands for operands in dots), dots


# ---------------------------------------------------------------------------------------------
# the space on real tasks
# ---------------------------------------------------------------------------------------------


#: QDQ convs whose input is the graph input (its zero point is not 0: the task adds the
#: zero-point correction; the padding by it is the task before).
#: The SiLU one's epilogue reads its quantized activation from a table (lookup_tables.py).
QDQ_CONVS: dict[str, Callable[[], onnx.ModelProto]] = {
    "3x3-stride2": lambda: conv_net(
        in_channels=16, out_channels=64, size=12, strides=2, relu=False
    ),
    "1x1": lambda: conv_net(in_channels=64, out_channels=48, size=7, kernel=1, pads=0),
    "3x3-silu": lambda: silu_model(in_channels=16, out_channels=32, size=12),
    # 3 channels padded to 4 (conv kind int8-stem)
    "stem": lambda: conv_net(in_channels=3, out_channels=32, size=32, kernel=7, strides=2, pads=3),
}


@pytest.fixture(scope="module")
def int8_tasks() -> dict[str, IRModule]:
    """The int8 conv task of each of ``QDQ_CONVS`` quantized, planned for Zen 4."""
    space = Int8VnniConvSpace()
    found = {}
    for name, build in QDQ_CONVS.items():
        qdq = quantize_qdq(build())
        _, tasks = extract_tasks(load_model(to_bytes(qdq)), make_target(AVX512), "nchwc")
        (found[name],) = [task.mod for task in tasks if space.applies_to(task.mod)]
    return found


def _out_chunks(mod: IRModule) -> int:
    sch = Schedule(mod)
    return int(sch.get(sch.get_loops(sch.get_sblock(INT8_CONV_BLOCK))[1]).extent)


def test_the_space_takes_the_integer_convs_only(int8_tasks) -> None:
    assert {name: _out_chunks(mod) for name, mod in int8_tasks.items()} == {
        "3x3-stride2": 4,
        "1x1": 3,
        "3x3-silu": 2,
        "stem": 2,
    }
    assert "take" in int8_tasks["3x3-silu"]["main"].script()
    for mod in int8_tasks.values():
        assert not is_blocked_conv(mod)  # not an fp32 space's task
    fp32 = conv_task(dict(in_channels=16, out_channels=32, size=8), is_blocked_conv, AVX512)
    assert not Int8VnniConvSpace().applies_to(fp32.mod)


@pytest.mark.parametrize("name", list(QDQ_CONVS))
def test_one_design_per_output_channel_block(int8_tasks, name: str) -> None:
    task = int8_tasks[name]
    target = make_target(AVX512)
    generator = Int8VnniConvSpace().generator(target)
    ms.TuneContext(mod=task, target=target, space_generator=generator, task_name="task")
    designs = generator.generate_design_space(task)
    chunks = _out_chunks(task)
    expected = [c for c in OC_BLOCKS if chunks % c == 0]
    traces = [str(sch.trace) for sch in designs]
    split = r"sch\.split\(loop=l\d+, factors=\[None, (\d+)\]"
    assert [int(re.findall(split, trace)[0]) for trace in traces] == expected
    for oc_inner, trace in zip(expected, traces, strict=True):
        # the columns: at most Zen 4's 28 accumulators over the chunks of the block
        limits = re.findall(r"max_innermost_factor=(\d+)", trace)
        assert limits == [str(28 // oc_inner)], trace
        assert "convtune_dot_16x4_vnni_local" in trace


@needs_vnni
@pytest.mark.parametrize("name", list(QDQ_CONVS))
def test_a_real_tasks_design_equals_the_unscheduled_task(int8_tasks, name: str) -> None:
    """The task the model builds (its epilogue: the zero-point correction, the scale, the bias,
    ReLU, the output quantize and dequantize) scheduled by each design computes what its TIR
    computes."""
    task = int8_tasks[name]
    infos = ArgInfo.from_prim_func(task["main"])
    assert [str(i.dtype) for i in infos].count("int32") == 1  # the zero-point correction
    args = random_task_args(task)
    reference = run(task, args)
    assert len(np.unique(reference)) > 16  # not all clamped
    chunks = _out_chunks(task)
    for oc_inner in (c for c in OC_BLOCKS if chunks % c == 0):
        sch = Schedule(task, seed=1)
        schedule_int8_conv(sch, oc_inner)
        np.testing.assert_array_equal(run(sch.mod, args), reference, err_msg=f"{oc_inner=}")
