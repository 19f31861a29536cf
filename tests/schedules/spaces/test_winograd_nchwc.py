"""Winograd F(2×2,3×3) and F(4×4,3×3) in the blocked layout (schedules/spaces/winograd_nchwc.py)
equal the direct convolution within the documented tolerance (schedules/ops/winograd.py): odd
spatial sizes (partial output tiles), no or asymmetric padding, batch > 1, different input and
output blocks; unscheduled, and under every register block the space can sample."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
import tvm
from tvm import s_tir, te, topi

from convtune.schedules.ops import winograd, winograd_conv
from convtune.schedules.ops.isa import has_bf16
from convtune.schedules.spaces import winograd_nchwc
from convtune.schedules.spaces.generic import GenericSpace
from convtune.schedules.spaces.registry import applicable
from convtune.schedules.spaces.winograd_nchwc import Sketch
from convtune.tuner.target import make_target
from tests.schedules.kernels import assembly, run, with_each_distance

needs_bf16 = pytest.mark.skipif(
    not has_bf16(make_target(None)), reason="the host CPU has no AVX-512 BF16 (vdpbf16ps)"
)

SHAPES = {
    "odd-7x7": dict(batch=1, channels=(16, 32), blocks=(16, 16), size=(7, 7), pads=(1, 1, 1, 1)),
    "odd-9x11-no-pad": dict(
        batch=1, channels=(16, 16), blocks=(8, 16), size=(9, 11), pads=(0, 0, 0, 0)
    ),
    "batch2-asym-pads": dict(
        batch=2, channels=(8, 16), blocks=(8, 8), size=(10, 6), pads=(0, 1, 2, 1)
    ),
}


def direct_conv(x: np.ndarray, w: np.ndarray, pads: tuple[int, ...]) -> np.ndarray:
    """float64 reference: the direct 3×3 stride-1 convolution, NCHW."""
    top, left, bottom, right = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    oh, ow = xp.shape[2] - 2, xp.shape[3] - 2
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for kh in range(3):
        for kw in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, kh : kh + oh, kw : kw + ow], w[:, :, kh, kw])
    return out


def blocked(x: np.ndarray, block: int) -> np.ndarray:
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def case(name: str, tile: int) -> tuple[tvm.IRModule, list[np.ndarray], np.ndarray]:
    """The kernel with a ReLU epilogue (as a fused task has one), its arguments and the
    float64 reference, blocked."""
    shape = SHAPES[name]
    (ci, co), (a, b), (h, w) = shape["channels"], shape["blocks"], shape["size"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((shape["batch"], ci, h, w)).astype("float32")
    weight = (rng.standard_normal((co, ci, 3, 3)) * np.sqrt(2 / (9 * ci))).astype("float32")
    reference = blocked(np.maximum(direct_conv(x, weight, shape["pads"]), 0), b)
    packed = winograd_conv.pack_weight(weight, tile, b)
    data = te.placeholder(blocked(x, a).shape, name="data")
    u = te.placeholder(packed.shape, name="packed")
    out = topi.nn.relu(winograd_conv.conv2d_winograd_nchwc(data, u, shape["pads"], tile, "float32"))
    mod = tvm.IRModule({"main": te.create_prim_func([data, u, out])})
    return mod, [blocked(x, a), packed, np.zeros(reference.shape, "float32")], reference


def assert_within_tolerance(got: np.ndarray, reference: np.ndarray, tile: int) -> None:
    error = np.abs(got - reference).max()
    assert error <= winograd.atol(tile) * np.abs(reference).max(), error


@pytest.mark.parametrize("tile", winograd.TILE_SIZES)
@pytest.mark.parametrize("name", list(SHAPES))
def test_unscheduled_winograd_equals_direct(name: str, tile: int) -> None:
    mod, args, reference = case(name, tile)
    assert_within_tolerance(run(mod, args), reference, tile)


@pytest.mark.parametrize("tile", winograd.TILE_SIZES)
@pytest.mark.parametrize("name", ["odd-7x7", "batch2-asym-pads"])
def test_sampled_register_blocks_of_both_widths_equal_direct(name: str, tile: int) -> None:
    mod, args, reference = case(name, tile)
    checked = set()
    # Every choice of a sketch is covered: both widths, both paddings, both parallel splits.
    sketches = [Sketch(1, False), Sketch(2, True), Sketch(2, False, tile_parallel=True)]
    for sketch in sketches:
        for seed in range(1, 9):
            sch = s_tir.Schedule(mod, seed=seed)
            winograd_nchwc.schedule_winograd(sch, 28, sketch)
            rows = str(next(iter(sch.trace.decisions.values())))
            if (sketch, rows) in checked:
                continue
            checked.add((sketch, rows))
            assert_within_tolerance(run(sch.mod, args), reference, tile)
    assert {sketch for sketch, _ in checked} == set(sketches)


@pytest.mark.parametrize("tile_parallel", [False, True])
def test_weight_prefetch_of_each_distance_equals_direct(tile_parallel: bool) -> None:
    """The GEMM's prefetch of U, forced to each distance the search may choose: a prefetch in
    the assembly exactly when it is non-zero, the output within tolerance either way."""
    mod, args, reference = case("odd-7x7", 4)
    design = s_tir.Schedule(mod, seed=1)
    winograd_nchwc.schedule_winograd(design, 28, Sketch(2, False, tile_parallel))
    forced = list(with_each_distance(design, mod))
    assert [distance for distance, _ in forced] == list(winograd_nchwc.WEIGHT_PREFETCH_DISTANCES)
    for distance, scheduled in forced:
        assert ("prefetcht0" in assembly(scheduled)) == (distance > 0)
        assert_within_tolerance(run(scheduled, args), reference, 4)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_only_the_winograd_space_schedules_winograd_tasks(precision: str) -> None:
    mod = case("odd-7x7", 4)[0] if precision == "fp32" else bf16_case(4)[0]
    spaces = applicable(mod)
    assert [s.name for s in spaces] == [winograd_nchwc.SPACE_NAME]
    target = make_target(None)
    generator = spaces[0].generator(target)
    s_tir.meta_schedule.TuneContext(mod=mod, target=target, space_generator=generator)
    # Two output-channel blocks: one and two blocks wide, each with and without a pad pass,
    # threads over (ε, ν, channels) or over tiles.
    assert len(generator.generate_design_space(mod)) == 8
    assert winograd_conv.winograd_tile(mod) == 4
    assert not GenericSpace().applies_to(mod)


def test_packed_weights_are_the_transform_with_output_channels_blocked() -> None:
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((32, 16, 3, 3)).astype("float32")
    packed = winograd_conv.pack_weight(weight, 4, 16)
    assert packed.shape == (6, 6, 2, 16, 16)
    _, _, g = winograd.transform_matrices(4)
    expected = g @ weight[17, 3].astype(np.float64) @ g.T  # out channel 17 = chunk 1, lane 1
    np.testing.assert_allclose(packed[:, :, 1, 3, 1], expected, rtol=1e-6, atol=1e-6)


def test_eligibility() -> None:
    assert winograd.applies((3, 3), (1, 1), (1, 1), 1)
    assert not winograd.applies((3, 3), (2, 2), (1, 1), 1)
    assert not winograd.applies((3, 3), (1, 1), (2, 2), 1)
    assert not winograd.applies((1, 1), (1, 1), (1, 1), 1)
    assert not winograd.applies((3, 3), (1, 1), (1, 1), 32)


def bf16_case(tile: int) -> tuple[tvm.IRModule, list[np.ndarray], np.ndarray]:
    """The bf16 kernel (``--precision bf16``: bf16 data, U packed for ``vdpbf16ps``, fp32 out)
    with a ReLU epilogue, on bf16-rounded data and weights; the float64 direct reference of
    those same values."""
    shape = SHAPES["odd-7x7"]
    (ci, co), (a, b), (h, w) = shape["channels"], shape["blocks"], shape["size"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, ci, h, w)).astype(ml_dtypes.bfloat16)
    weight = (rng.standard_normal((co, ci, 3, 3)) * np.sqrt(2 / (9 * ci))).astype(
        ml_dtypes.bfloat16
    )
    exact = direct_conv(x.astype(np.float64), weight.astype(np.float64), shape["pads"])
    reference = blocked(np.maximum(exact, 0), b)
    packed = winograd_conv.pack_weight(weight, tile, b, dot_group=2)
    data = te.placeholder(blocked(x, a).shape, "bfloat16", name="data")
    u = te.placeholder(packed.shape, "bfloat16", name="packed")
    out = topi.nn.relu(winograd_conv.conv2d_winograd_nchwc(data, u, shape["pads"], tile, "float32"))
    mod = tvm.IRModule({"main": te.create_prim_func([data, u, out])})
    return mod, [blocked(x, a), packed, np.zeros(reference.shape, "float32")], reference


def assert_within_bf16_tolerance(got: np.ndarray, reference: np.ndarray, tile: int) -> None:
    error = np.abs(got - reference).max()
    assert error <= winograd.atol(tile, "bf16") * np.abs(reference).max(), error


@pytest.mark.parametrize("tile", winograd.TILE_SIZES)
def test_unscheduled_bf16_winograd_equals_direct(tile: int) -> None:
    mod, args, reference = bf16_case(tile)
    assert_within_bf16_tolerance(run(mod, args), reference, tile)


@needs_bf16
@pytest.mark.parametrize("tile", winograd.TILE_SIZES)
def test_bf16_register_blocks_run_vdpbf16ps_and_equal_direct(tile: int) -> None:
    """Each sketch of the bf16 GEMM tensorized with ``vdpbf16ps`` (in the assembly, on zmm)
    and within the bf16 tolerance of the direct conv."""
    mod, args, reference = bf16_case(tile)
    for sketch in [Sketch(1, False), Sketch(2, True), Sketch(2, False, tile_parallel=True)]:
        sch = s_tir.Schedule(mod, seed=1)
        winograd_nchwc.schedule_winograd(sch, 28, sketch)
        dots = re.findall(r"^\s*vdpbf16ps\s+(.*)$", assembly(sch.mod), re.MULTILINE)
        assert dots and all("%zmm" in operands for operands in dots), (sketch, dots)
        assert_within_bf16_tolerance(run(sch.mod, args), reference, tile)


def test_bf16_packed_weights_hold_channel_pairs_side_by_side() -> None:
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((32, 16, 3, 3)).astype("float32")
    fp32 = winograd_conv.pack_weight(weight, 2, 16)  # (α, α, CO/16, CI, 16)
    pairs = winograd_conv.pack_weight(weight, 2, 16, dot_group=2)
    assert pairs.shape == (4, 4, 2, 8, 16, 2)
    # Input channel 2k + j of output lane l is pair k, element j.
    np.testing.assert_array_equal(pairs[:, :, 1, 3, 5, 1], fp32[:, :, 1, 7, 5])
    np.testing.assert_array_equal(pairs[:, :, 0, 6, 9, 0], fp32[:, :, 0, 12, 9])
