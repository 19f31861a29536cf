"""The int8-amx space: u8×s8→s32 convs as AMX tile register blocks (schedules/ops/int8_amx.py,
schedules/ops/amx.py, schedules/spaces/int8_amx.py, schedules/lowering/amx_tiles.py).

A kernel is the AMX op's TE conv with a requantizing epilogue (per-channel scale, round, zero
point, clamp to u8), scheduled with every design of the space and compared exactly with a numpy
int64 reference. Running needs AMX-INT8 on the host; the assembly is checked for Sapphire
Rapids on any host.
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te
from tvm import tirx as tir
from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from bench.qdq import quantize_qdq
from convtune.schedules.lowering.pipeline import use_convtune_lowering
from convtune.schedules.ops.amx import AmxBlock, tile_config_ir
from convtune.schedules.ops.int8_amx import amx_refusal, conv2d_nchwc_int8_amx, pack_weight
from convtune.schedules.ops.isa import has_amx_int8
from convtune.schedules.spaces.int8_amx import (
    AmxDesign,
    Int8AmxConvSpace,
    amx_blocks,
    amx_conv,
    schedule_amx_conv,
)
from convtune.schedules.spaces.registry import SPACES
from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.target import make_target
from tests.models import conv_net, to_bytes
from tests.schedules.dot_conv_cases import (
    from_blocked,
    random_task_args,
    reference_conv,
    to_blocked,
)
from tests.schedules.kernels import run
from tests.schedules.spaces.test_int8_vnni import QDQ_CONVS

SAPPHIRE_RAPIDS = "llvm -mcpu=sapphirerapids -num-cores=2"
needs_amx = pytest.mark.skipif(
    not has_amx_int8(make_target(None)), reason="the host CPU has no AMX-INT8 (tdpbusd)"
)
#: (in channels, out channels, size, kernel, stride, pads top/left/bottom/right)
CONFIGS = {
    "3x3-pad1": (32, 64, 10, 3, 1, (1, 1, 1, 1)),
    "3x3-stride2": (16, 48, 15, 3, 2, (1, 1, 1, 1)),
    "3x3-two-pixel-tiles": (32, 32, 28, 3, 1, (1, 1, 1, 1)),
    "asymmetric-pads": (16, 32, 9, 3, 1, (0, 1, 2, 1)),
    "2x2": (16, 16, 8, 2, 1, (0, 0, 0, 0)),
    "1x1": (64, 64, 7, 1, 1, (0, 0, 0, 0)),
    "1x1-stride2": (32, 64, 14, 1, 2, (0, 0, 0, 0)),
}
ZERO_POINT = 100


def amx_case(name: str, seed: int = 0):
    """The TE module of ``CONFIGS[name]`` (the op's conv, a scale per channel, requantized to
    u8), its arguments and the expected u8 output (NCHW)."""
    ic, oc, size, kernel, stride, pads = CONFIGS[name]
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (1, ic, size, size), dtype=np.uint8)
    w = rng.integers(-128, 128, (oc, ic, kernel, kernel), dtype=np.int8)
    acc = reference_conv(x, w, stride, pads)
    scale = (rng.uniform(0.5, 1.5, oc) * 50 / acc.std()).astype(np.float32)
    scaled = acc.astype(np.float32) * scale.reshape(1, -1, 1, 1)
    expected = np.clip(np.round(scaled) + np.float32(ZERO_POINT), 0, 255).astype(np.uint8)
    packed = pack_weight(w)
    data = te.placeholder((1, ic // 16, size, size, 16), "uint8", name="data")
    weight = te.placeholder(packed.shape, "int8", name="weight")
    scales = te.placeholder((oc // 16, 16), "float32", name="scale")
    conv = conv2d_nchwc_int8_amx(data, weight, (stride, stride), pads, kernel)

    def requantize(n, c, h, w, b):
        value = te.round(conv[n, c, h, w, b].astype("float32") * scales[c, b])
        value = value + tir.const(ZERO_POINT, "float32")
        clamped = te.max(te.min(value, tir.const(255, "float32")), tir.const(0, "float32"))
        return clamped.astype("uint8")

    out = te.compute(conv.shape, requantize, name="requantized")
    mod = IRModule({"main": te.create_prim_func([data, weight, scales, out])})
    dest = np.zeros((1, oc // 16, *expected.shape[2:], 16), np.uint8)
    return mod, [to_blocked(x, 16), packed, scale.reshape(-1, 16), dest], expected


def designs(mod: IRModule) -> list[AmxDesign]:
    conv = amx_conv(Schedule(mod))
    assert conv is not None
    return [AmxDesign(block, outer) for block in conv.blocks() for outer in (False, True)]


def test_the_reference_is_the_unscheduled_kernel() -> None:
    """The weight packing (kernel columns in the reduction, zero past them) and the compute
    describe the conv: its unscheduled TIR computes the reference (no AMX instruction)."""
    for name in ("3x3-stride2", "asymmetric-pads", "1x1"):
        mod, args, expected = amx_case(name)
        got = from_blocked(run(mod, args))
        np.testing.assert_array_equal(got, expected, err_msg=name)
        assert len(np.unique(got)) > 64 and np.mean((got == 0) | (got == 255)) < 0.1


def test_register_blocks_are_the_widest_row_tiles_with_at_most_four_accumulators() -> None:
    blocks = amx_blocks(56, 4)
    assert {(b.rows, b.m_tiles, b.n_tiles) for b in blocks} == {
        (14, 1, 1), (14, 1, 2), (14, 1, 4), (14, 2, 1), (14, 2, 2), (14, 4, 1),
    }  # fmt: skip
    assert [(b.m_tiles, b.n_tiles) for b in amx_blocks(7, 3)] == [(1, 1), (1, 3)]
    assert amx_blocks(17, 4) == [], "a prime width over 16 leaves tiles of one row"
    assert amx_blocks(3, 4) == [], "three rows do less per tdpbusd than a zmm register block"


def test_the_op_takes_kernels_up_to_four_columns_ungrouped() -> None:
    assert amx_refusal(64, 64, (3, 3), (1, 1), 1) == ""
    assert amx_refusal(64, 64, (1, 1), (1, 1), 1) == ""
    assert "columns" in amx_refusal(64, 64, (5, 5), (1, 1), 1)
    assert "dilated" in amx_refusal(64, 64, (3, 3), (2, 2), 1)
    assert "grouped" in amx_refusal(64, 64, (3, 3), (1, 1), 4)
    assert "multiples of 16" in amx_refusal(24, 64, (3, 3), (1, 1), 1)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_space_reads_each_convs_geometry(name: str) -> None:
    _, oc, _, kernel, stride, _ = CONFIGS[name]
    mod, _, expected = amx_case(name)
    conv = amx_conv(Schedule(mod))
    assert conv is not None
    assert (conv.out_width, conv.oc_chunks) == (expected.shape[3], oc // 16)
    assert conv.stride == stride and conv.taps == (1 if kernel == 1 else 4)
    assert Int8AmxConvSpace().applies_to(mod)


def test_the_space_needs_amx_int8_on_the_target() -> None:
    space = next(s for s in SPACES if isinstance(s, Int8AmxConvSpace))
    assert space.available(make_target(SAPPHIRE_RAPIDS))
    assert not space.available(make_target("llvm -mcpu=znver4 -num-cores=2"))
    assert not space.available(make_target("llvm -mcpu=icelake-server -num-cores=2"))
    # A VM the LLVM name undersells: rocketlake with the AMX flags of its host.
    amx_vm = '{"kind": "llvm", "mcpu": "rocketlake", "mattr": ["+amx-tile", "+amx-int8"]}'
    assert space.available(make_target(amx_vm))


@needs_amx
@pytest.mark.parametrize("name", list(CONFIGS))
def test_amx_kernel_equals_the_integer_reference(name: str) -> None:
    mod, args, expected = amx_case(name)
    for design in designs(mod):
        sch = Schedule(mod)
        schedule_amx_conv(sch, design)
        np.testing.assert_array_equal(
            from_blocked(run(sch.mod, args)), expected, err_msg=f"{design}"
        )


def _assembly(name: str, design: AmxDesign) -> str:
    mod, _, _ = amx_case(name)
    sch = Schedule(mod)
    schedule_amx_conv(sch, design)
    use_convtune_lowering()
    return str(tvm.compile(sch.mod, target=make_target(SAPPHIRE_RAPIDS)).mod.inspect_source("asm"))


def test_the_kernel_is_tdpbusd_with_the_tiles_configured_once_per_task() -> None:
    """Compiled for Sapphire Rapids (on any host): four ``tdpbusd`` per reduction step of a
    2×2 block, the accumulators zeroed and stored, and one ``ldtilecfg`` in the parallel task
    (not one per register block: it costs 100 ns, a tenth of a 56×56 conv's time)."""
    asm = _assembly("3x3-two-pixel-tiles", AmxDesign(AmxBlock(14, 2, 2, 1, 4), False))
    assert asm.count("tdpbusd") >= 4
    assert asm.count("tilestored") >= 4 and asm.count("tilezero") >= 4
    assert asm.count("ldtilecfg") == 1


def test_the_tile_configuration_asks_linux_for_the_tiles_once() -> None:
    """The configuration's IR: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) behind a
    flag, then palette 1 with the block's rows (accumulators and inputs) and K/4-row weights."""
    ir = tile_config_ir(AmxBlock(14, 2, 2, 1, 4).config_function)
    assert ir is not None
    assert "@syscall(i64 158, i64 4131, i64 18)" in ir
    assert "store i8 14, ptr %rows0" in ir and "store i16 64, ptr %colsb4" in ir
    assert "store i8 16, ptr %rows6" in ir and "store i16 64, ptr %colsb6" in ir
    narrow = tile_config_ir(AmxBlock(7, 1, 4, 2, 1).config_function)
    assert narrow is not None and "store i16 16, ptr %colsb4" in narrow
    assert "store i8 4, ptr %rows6" in narrow
    assert tile_config_ir("convtune_mxcsr_flush") is None


# ---------------------------------------------------------------------------------------------
# the space on real tasks: the int8-vnni tests' QDQ convs, planned for Sapphire Rapids
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def amx_tasks() -> dict[str, IRModule]:
    """The AMX conv task of each of the int8-vnni tests' QDQ convs, planned for Sapphire
    Rapids: the conv kind int8-amx took every one of them."""
    space = Int8AmxConvSpace()
    found = {}
    for name, build in QDQ_CONVS.items():
        qdq = quantize_qdq(build())
        relax_model, tasks = extract_tasks(
            load_model(to_bytes(qdq)), make_target(SAPPHIRE_RAPIDS), "nchwc"
        )
        assert relax_model.plan is not None
        (conv,) = [c for c in relax_model.plan.convs if c.precision == "int8"]
        assert conv.reason == "u8×s8→s32 (AMX tiles)"
        (task,) = [task for task in tasks if space.applies_to(task.mod)]
        # Linked to its ONNX node although its reduction runs over four kernel columns.
        assert task.kind == "conv" and task.onnx_nodes == ["conv0"], task.description
        found[name] = task.mod
    return found


def test_every_design_of_a_real_task_is_generated(amx_tasks) -> None:
    target = make_target(SAPPHIRE_RAPIDS)
    for name, task in amx_tasks.items():
        generator = Int8AmxConvSpace().generator(target)
        ms.TuneContext(mod=task, target=target, space_generator=generator, task_name=name)
        generated = generator.generate_design_space(task)
        assert len(generated) == len(designs(task)) >= 2, name
        assert all("convtune_amx_update" in str(sch.trace) for sch in generated), name


@needs_amx
@pytest.mark.parametrize("name", list(QDQ_CONVS))
def test_a_real_tasks_design_equals_the_unscheduled_task(amx_tasks, name: str) -> None:
    """The task the model builds (the zero-point correction, the scale, the bias, ReLU or the
    SiLU table, the output quantize) scheduled by each design computes what its TIR computes."""
    task = amx_tasks[name]
    args = random_task_args(task)
    reference = run(task, args)
    assert len(np.unique(reference)) > 16  # not all clamped
    for design in designs(task):
        sch = Schedule(task)
        schedule_amx_conv(sch, design)
        np.testing.assert_array_equal(run(sch.mod, args), reference, err_msg=f"{design}")


def test_a_conv_whose_rows_no_tile_divides_stays_a_vnni_conv() -> None:
    """17 output columns: a tile would hold one row; the conv kind int8 (VNNI) takes it."""
    qdq = quantize_qdq(conv_net(in_channels=16, out_channels=32, size=17))
    relax_model, _ = extract_tasks(load_model(to_bytes(qdq)), make_target(SAPPHIRE_RAPIDS), "nchwc")
    assert relax_model.plan is not None
    (conv,) = [c for c in relax_model.plan.convs if c.precision == "int8"]
    assert conv.reason == "u8×s8→s32 (VNNI)"
