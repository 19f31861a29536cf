"""The AMX spaces: u8×s8→s32 (int8-amx) and bf16×bf16→fp32 (bf16-amx) convs as AMX tile
register blocks (schedules/ops/amx_conv.py, schedules/ops/amx.py, schedules/spaces/amx_conv.py,
schedules/lowering/amx_tiles.py).

An int8 kernel is the AMX op's TE conv with a requantizing epilogue (per-channel scale, round,
zero point, clamp to u8), scheduled with every design of the space and compared exactly with a
numpy int64 reference; a bf16 kernel has a bias and ReLU in fp32 and is compared with a float64
conv of the same bf16 values (their products are exact in fp32: only the order of the sums
differs). Running needs AMX-INT8 / AMX-BF16 on the host; the assembly is checked for Sapphire
Rapids on any host.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
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
from convtune.schedules.ops.amx import AmxBlock, tile_config_ir
from convtune.schedules.ops.amx_conv import (
    STEM_DATA_BLOCK,
    amx_refusal,
    conv2d_nchwc_amx,
    pack_weight,
    stem_refusal,
)
from convtune.schedules.ops.dot_conv import BF16, INT8, DotFormat
from convtune.schedules.ops.isa import has_amx_bf16, has_amx_int8
from convtune.schedules.spaces.amx_conv import (
    AmxDesign,
    Bf16AmxConvSpace,
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
    bf16_relu_arrays,
    from_blocked,
    random_task_args,
    reference_conv,
    to_blocked,
)
from tests.schedules.kernels import assert_close, run
from tests.schedules.spaces.test_int8_vnni import QDQ_CONVS

SAPPHIRE_RAPIDS = "llvm -mcpu=sapphirerapids -num-cores=2"
needs_amx = pytest.mark.skipif(
    not has_amx_int8(make_target(None)), reason="the host CPU has no AMX-INT8 (tdpbusd)"
)
needs_amx_bf16 = pytest.mark.skipif(
    not has_amx_bf16(make_target(None)), reason="the host CPU has no AMX-BF16 (tdpbf16ps)"
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
    "4x4-stride2": (16, 32, 16, 4, 2, (1, 1, 1, 1)),
    # RGB stems: NCHW4c data, a kernel row in one tile row
    "stem-7x7-stride2": (3, 64, 32, 7, 2, (3, 3, 3, 3)),
    "stem-3x3-stride2": (3, 16, 20, 3, 2, (1, 1, 1, 1)),
}


#: Convs in 64-channel blocks (``tuner/graph/tile_blocks.py``): CONFIGS' geometry, then the
#: (data, output) blocks.
TILE_BLOCK_CONFIGS = {
    "1x1-64c": ((128, 128, 7, 1, 1, (0, 0, 0, 0)), (64, 64)),
    "3x3-64c-in": ((64, 32, 10, 3, 1, (1, 1, 1, 1)), (64, 16)),
    "3x3-stride2-64c-out": ((32, 128, 15, 3, 2, (1, 1, 1, 1)), (16, 64)),
    "stem-64c-out": ((3, 64, 32, 7, 2, (3, 3, 3, 3)), (STEM_DATA_BLOCK, 64)),
}


def data_block(in_channels: int) -> int:
    return 16 if in_channels % 16 == 0 else STEM_DATA_BLOCK


def blocked_input(x: np.ndarray, block: int | None = None) -> np.ndarray:
    """NCHW → the op's data: NCHW16c (or ``block``), or the stem's NCHW4c with its channels
    padded to 4."""
    block = block or data_block(x.shape[1])
    padded = np.zeros((x.shape[0], -(-x.shape[1] // block) * block, *x.shape[2:]), x.dtype)
    padded[:, : x.shape[1]] = x
    return to_blocked(padded, block)


def expected_taps(name: str, fmt: DotFormat) -> int:
    ic, _, _, kernel, _, _ = CONFIGS[name]
    if data_block(ic) == STEM_DATA_BLOCK or kernel == 1:
        return kernel
    return 4 if fmt is INT8 else 2


ZERO_POINT = 100


def amx_case(name: str, seed: int = 0):
    """The TE module of ``CONFIGS[name]`` or ``TILE_BLOCK_CONFIGS[name]`` (the op's conv, a
    scale per channel, requantized to u8), its arguments and the expected u8 output (NCHW)."""
    if name in TILE_BLOCK_CONFIGS:
        (ic, oc, size, kernel, stride, pads), (in_block, out_block) = TILE_BLOCK_CONFIGS[name]
    else:
        ic, oc, size, kernel, stride, pads = CONFIGS[name]
        in_block, out_block = data_block(ic), 16
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (1, ic, size, size), dtype=np.uint8)
    w = rng.integers(-128, 128, (oc, ic, kernel, kernel), dtype=np.int8)
    acc = reference_conv(x, w, stride, pads)
    scale = (rng.uniform(0.5, 1.5, oc) * 50 / acc.std()).astype(np.float32)
    scaled = acc.astype(np.float32) * scale.reshape(1, -1, 1, 1)
    expected = np.clip(np.round(scaled) + np.float32(ZERO_POINT), 0, 255).astype(np.uint8)
    packed = pack_weight(w, INT8, in_block)
    data_args = blocked_input(x, in_block)
    data = te.placeholder(data_args.shape, "uint8", name="data")
    weight = te.placeholder(packed.shape, "int8", name="weight")
    scales = te.placeholder((oc // out_block, out_block), "float32", name="scale")
    conv = conv2d_nchwc_amx(data, weight, (stride, stride), pads, kernel, out_block)

    def requantize(n, c, h, w, b):
        value = te.round(conv[n, c, h, w, b].astype("float32") * scales[c, b])
        value = value + tir.const(ZERO_POINT, "float32")
        clamped = te.max(te.min(value, tir.const(255, "float32")), tir.const(0, "float32"))
        return clamped.astype("uint8")

    out = te.compute(conv.shape, requantize, name="requantized")
    mod = IRModule({"main": te.create_prim_func([data, weight, scales, out])})
    dest = np.zeros((1, oc // out_block, *expected.shape[2:], out_block), np.uint8)
    return mod, [data_args, packed, scale.reshape(-1, out_block), dest], expected


def bf16_case(name: str, seed: int = 0):
    """The TE module of ``CONFIGS[name]`` in bf16 (the op's conv, a bias and a ReLU in fp32),
    its arguments and the expected fp32 output (NCHW)."""
    ic, oc, size, kernel, stride, pads = CONFIGS[name]
    x, w, bias, expected = bf16_relu_arrays(ic, oc, size, kernel, stride, pads, seed)
    packed = pack_weight(w, BF16, data_block(ic))
    data_args = blocked_input(x)
    data = te.placeholder(data_args.shape, "bfloat16", name="data")
    weight = te.placeholder(packed.shape, "bfloat16", name="weight")
    biases = te.placeholder((oc // 16, 16), "float32", name="bias")
    out = conv2d_nchwc_amx(data, weight, (stride, stride), pads, kernel)
    relu = te.compute(
        out.shape, lambda n, c, h, w, b: te.max(out[n, c, h, w, b] + biases[c, b], 0.0), name="relu"
    )
    mod = IRModule({"main": te.create_prim_func([data, weight, biases, relu])})
    dest = np.zeros((1, oc // 16, *expected.shape[2:], 16), np.float32)
    return mod, [data_args, packed, bias.reshape(-1, 16), dest], expected


def designs(mod: IRModule) -> list[AmxDesign]:
    conv = amx_conv(Schedule(mod))
    assert conv is not None
    return [AmxDesign(block, outer) for block in conv.blocks() for outer in (False, True)]


def test_the_reference_is_the_unscheduled_kernel() -> None:
    """The weight packing (kernel columns in the reduction, zero past them) and the compute
    describe the conv: its unscheduled TIR computes the reference (no AMX instruction)."""
    for name in ("3x3-stride2", "asymmetric-pads", "1x1", "4x4-stride2", "stem-7x7-stride2"):
        mod, args, expected = amx_case(name)
        got = from_blocked(run(mod, args))
        np.testing.assert_array_equal(got, expected, err_msg=name)
        assert len(np.unique(got)) > 64 and np.mean((got == 0) | (got == 255)) < 0.1
        mod, args, expected = bf16_case(name)
        assert_close(from_blocked(run(mod, args)), expected)


def test_the_stem_takes_up_to_four_channels_and_a_kernel_row_in_a_tile_row() -> None:
    x, w = (1, 3, 224, 224), (64, 3, 7, 7)
    assert stem_refusal(x, w, 112, (1, 1), 1, INT8) == ""
    assert stem_refusal(x, w, 112, (1, 1), 1, BF16) == "", "7 pixels × 4 bf16 channels: 56 bytes"
    assert "wider" in stem_refusal(x, (64, 3, 9, 9), 112, (1, 1), 1, BF16)
    assert "input channels" in stem_refusal((1, 8, 224, 224), (64, 8, 7, 7), 112, (1, 1), 1, INT8)
    assert "output channels" in stem_refusal(x, (24, 3, 7, 7), 112, (1, 1), 1, INT8)
    assert "no tile" in stem_refusal(x, w, 113, (1, 1), 1, INT8)
    # The 3 channels padded to 4 with zeros: one chunk, 7 taps of one group.
    packed = pack_weight(np.ones((64, 3, 7, 7), np.int8), INT8, STEM_DATA_BLOCK)
    assert packed.shape == (1, 7, 1, 4, 7, 16, 4)
    assert packed[..., :3].all() and not packed[..., 3].any()


def test_bf16_packs_two_columns_a_tile_row_in_steps() -> None:
    """A bf16 pixel of 16 channels is 32 bytes: a 64-byte tile row holds two columns, so a
    3×3 kernel row is two steps of two columns, the fourth zero; a 1×1 one pixel a row."""
    w = np.arange(32 * 16 * 9, dtype=np.float32).reshape(32, 16, 3, 3).astype(ml_dtypes.bfloat16)
    packed = pack_weight(w, BF16)
    assert packed.shape == (1, 3, 2, 2, 16, 16, 2)
    assert not packed[:, :, 1, :, 8:].astype(np.float32).any(), "the 4th column is zero"
    # (ic chunk 0, row 1, step 1, oc chunk 1, tap 0 · 8 + group 3, lane 5, channel 1):
    # oc 16 + 5, ic 3 · 2 + 1, kh 1, kw 2.
    assert packed[0, 1, 1, 1, 3, 5, 1] == w[21, 7, 1, 2]
    assert pack_weight(w[:, :, :1, :1], BF16).shape == (1, 1, 1, 2, 8, 16, 2)


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
    _, oc, _, _, stride, _ = CONFIGS[name]
    mod, _, expected = amx_case(name)
    conv = amx_conv(Schedule(mod))
    assert conv is not None
    assert (conv.out_width, conv.oc_chunks) == (expected.shape[3], oc // 16)
    assert conv.stride == stride and conv.taps == expected_taps(name, INT8)
    assert conv.fmt is INT8 and Int8AmxConvSpace().applies_to(mod)
    assert not Bf16AmxConvSpace().applies_to(mod)
    bf16 = amx_conv(Schedule(bf16_case(name)[0]))
    assert bf16 is not None and bf16.fmt is BF16 and bf16.taps == expected_taps(name, BF16)
    assert bf16.pixel_channels == conv.pixel_channels == data_block(CONFIGS[name][0])


@pytest.mark.parametrize("name", list(TILE_BLOCK_CONFIGS))
def test_the_space_reads_the_blocks_of_a_64_channel_conv(name: str) -> None:
    """A 64-channel pixel fills a tile row alone (one tap, a 3×3 kernel row in three steps);
    64-channel output blocks hold four accumulator tiles, so a register block takes 1, 2 or 4
    of them (never 3: its tiles would straddle two blocks)."""
    (_, oc, _, kernel, stride, _), (in_block, out_block) = TILE_BLOCK_CONFIGS[name]
    mod, _, expected = amx_case(name)
    conv = amx_conv(Schedule(mod))
    assert conv is not None and Int8AmxConvSpace().applies_to(mod)
    assert (conv.out_width, conv.oc_chunks, conv.stride) == (expected.shape[3], oc // 16, stride)
    assert (conv.pixel_channels, conv.out_block) == (in_block, out_block)
    assert conv.taps == (kernel if in_block == STEM_DATA_BLOCK else 4 if in_block == 16 else 1)
    assert {b.depth for b in conv.blocks()} == {in_block * conv.taps}
    if out_block == 64:
        assert {b.n_tiles for b in conv.blocks()} <= {1, 2, 4}
    assert [b.n_tiles for b in amx_blocks(7, 12, out_block=64)] == [1, 2, 4]
    assert [b.n_tiles for b in amx_blocks(7, 12)] == [1, 2, 3, 4]


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


@needs_amx
@pytest.mark.parametrize("name", list(TILE_BLOCK_CONFIGS))
def test_64_channel_blocks_kernel_equals_the_integer_reference(name: str) -> None:
    mod, args, expected = amx_case(name)
    np.testing.assert_array_equal(from_blocked(run(mod, args)), expected)  # unscheduled
    for design in designs(mod):
        sch = Schedule(mod)
        schedule_amx_conv(sch, design)
        np.testing.assert_array_equal(
            from_blocked(run(sch.mod, args)), expected, err_msg=f"{design}"
        )


@needs_amx_bf16
@pytest.mark.parametrize("name", list(CONFIGS))
def test_bf16_amx_kernel_equals_the_float_reference(name: str) -> None:
    mod, args, expected = bf16_case(name)
    assert len(designs(mod)) >= 2
    for design in designs(mod):
        sch = Schedule(mod)
        schedule_amx_conv(sch, design)
        assert_close(from_blocked(run(sch.mod, args)), expected)


def _assembly(name: str, design: AmxDesign, fmt: DotFormat = INT8) -> str:
    mod = (amx_case if fmt is INT8 else bf16_case)(name)[0]
    sch = Schedule(mod)
    schedule_amx_conv(sch, design)
    use_convtune_lowering()
    return str(tvm.compile(sch.mod, target=make_target(SAPPHIRE_RAPIDS)).mod.inspect_source("asm"))


def test_the_kernel_is_tdpbusd_with_the_tiles_configured_once_per_task() -> None:
    """Compiled for Sapphire Rapids (on any host): four ``tdpbusd`` per reduction step of a
    2×2 block, the accumulators zeroed and stored, and one ``ldtilecfg`` in the parallel task
    (not one per register block: it costs 100 ns, a tenth of a 56×56 conv's time), and the
    thread's own configuration stored before it and loaded back after the task."""
    asm = _assembly("3x3-two-pixel-tiles", AmxDesign(AmxBlock(14, 2, 2, 1, 4), False))
    assert asm.count("tdpbusd") >= 4
    assert asm.count("tilestored") >= 4 and asm.count("tilezero") >= 4
    assert asm.count("ldtilecfg") == 2 and asm.count("sttilecfg") == 1


def test_the_bf16_kernel_is_tdpbf16ps() -> None:
    """bf16 on Sapphire Rapids (on any host): two steps of two columns a kernel row, a
    ``tdpbf16ps`` per accumulator, no ``tdpbusd``."""
    asm = _assembly("3x3-pad1", AmxDesign(AmxBlock(10, 1, 2, 1, 2, BF16), False), BF16)
    assert asm.count("tdpbf16ps") >= 2 and "tdpbusd" not in asm
    assert asm.count("tilestored") >= 2 and asm.count("ldtilecfg") == 2


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


#: The int8-vnni tests' QDQ convs and an RGB stem (7×7 stride 2, zero point padding).
AMX_QDQ_CONVS = {
    **QDQ_CONVS,
    "stem": lambda: conv_net(in_channels=3, out_channels=32, size=32, kernel=7, strides=2, pads=3),
}


@pytest.fixture(scope="module")
def amx_tasks() -> dict[str, IRModule]:
    """The AMX conv task of each of ``AMX_QDQ_CONVS``, planned for Sapphire Rapids: the conv
    kinds int8-amx and int8-amx-stem took every one of them."""
    space = Int8AmxConvSpace()
    found = {}
    for name, build in AMX_QDQ_CONVS.items():
        qdq = quantize_qdq(build())
        relax_model, tasks = extract_tasks(
            load_model(to_bytes(qdq)), make_target(SAPPHIRE_RAPIDS), "nchwc"
        )
        assert relax_model.plan is not None
        (conv,) = [c for c in relax_model.plan.convs if c.precision == "int8"]
        stem = "u8×s8→s32 stem (AMX tiles, NCHW4c in)"
        assert conv.reason == (stem if name == "stem" else "u8×s8→s32 (AMX tiles)")
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
@pytest.mark.parametrize("name", list(AMX_QDQ_CONVS))
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


# ---------------------------------------------------------------------------------------------
# bf16 (--precision bf16) on real tasks: a float model planned for Sapphire Rapids
# ---------------------------------------------------------------------------------------------

#: (in channels, kernel, stride, pads) of one fp32 conv to 32 channels at 14² (the stem at 28²),
#: with bias and ReLU.
BF16_CONVS = {
    "3x3": (32, 3, 1, 1),
    "1x1-stride2": (32, 1, 2, 0),
    "2x2": (32, 2, 1, 0),
    "stem": (3, 7, 2, 3),
}


@pytest.fixture(scope="module")
def bf16_tasks() -> dict[str, IRModule]:
    """The bf16-amx task of each of ``BF16_CONVS``, planned with ``--precision bf16``: the
    conv kinds bf16-amx and bf16-amx-stem took every one of them."""
    found = {}
    for name, (channels, kernel, stride, pads) in BF16_CONVS.items():
        size = 14 if channels == 32 else 28
        model = conv_net(
            in_channels=channels,
            out_channels=32,
            size=size,
            kernel=kernel,
            strides=stride,
            pads=pads,
        )
        relax_model, tasks = extract_tasks(
            load_model(to_bytes(model)), make_target(SAPPHIRE_RAPIDS), "nchwc", precision="bf16"
        )
        assert relax_model.plan is not None
        (conv,) = relax_model.plan.convs
        stem = "bf16×bf16→fp32 stem (AMX tiles, NCHW4c in)"
        reason = stem if name == "stem" else "bf16×bf16→fp32 (AMX tiles)"
        assert (conv.precision, conv.reason) == ("bf16", reason)
        notes = relax_model.fallbacks
        assert any("1 of 1 convs run as bf16×bf16→fp32 AMX-tile" in n for n in notes)
        (task,) = [task for task in tasks if Bf16AmxConvSpace().applies_to(task.mod)]
        assert task.kind == "conv" and task.onnx_nodes == ["conv0"], task.description
        found[name] = task.mod
    return found


def _float_args(task: IRModule, seed: int = 5) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    args = []
    for info in ArgInfo.from_prim_func(task["main"]):
        dtype = ml_dtypes.bfloat16 if str(info.dtype) == "bfloat16" else str(info.dtype)
        args.append(rng.standard_normal([int(d) for d in info.shape]).astype(dtype))
    return args


def test_every_bf16_design_of_a_real_task_is_generated(bf16_tasks) -> None:
    target = make_target(SAPPHIRE_RAPIDS)
    for name, task in bf16_tasks.items():
        generator = Bf16AmxConvSpace().generator(target)
        ms.TuneContext(mod=task, target=target, space_generator=generator, task_name=name)
        generated = generator.generate_design_space(task)
        assert len(generated) == len(designs(task)) >= 2, name
        assert all("convtune_amx_update_bf16" in str(sch.trace) for sch in generated), name


@needs_amx_bf16
@pytest.mark.parametrize("name", list(BF16_CONVS))
def test_a_real_bf16_tasks_design_equals_the_unscheduled_task(bf16_tasks, name: str) -> None:
    task = bf16_tasks[name]
    args = _float_args(task)
    reference = run(task, args)
    assert np.mean(reference > 0) > 0.2  # not all cut by the ReLU
    for design in designs(task):
        sch = Schedule(task)
        schedule_amx_conv(sch, design)
        assert_close(run(sch.mod, args), reference)


def test_bf16_space_needs_amx_bf16_on_the_target() -> None:
    space = next(s for s in SPACES if isinstance(s, Bf16AmxConvSpace))
    assert space.available(make_target(SAPPHIRE_RAPIDS))
    assert not space.available(make_target("llvm -mcpu=znver4 -num-cores=2"))
    int8_only = '{"kind": "llvm", "mcpu": "rocketlake", "mattr": ["+amx-tile", "+amx-int8"]}'
    assert not space.available(make_target(int8_only))
