"""Winograd F(2×2,3×3) and F(4×4,3×3) with build-time weight transforms equal the direct
convolution within the documented tolerance (schedules/winograd.py): odd spatial sizes (partial
output tiles), padding, batch > 1, and the MetaSchedule CPU rules' schedules too."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import s_tir, te

from convtune.schedules import winograd
from convtune.schedules.generic import GenericSpace
from convtune.tuner.target import make_target
from tests.schedules.kernels import run

SHAPES = {
    "odd-7x7": dict(batch=1, channels=(16, 8), size=(7, 7), pads=(1, 1, 1, 1)),
    "odd-9x11-no-pad": dict(batch=1, channels=(8, 16), size=(9, 11), pads=(0, 0, 0, 0)),
    "batch2-asym-pads": dict(batch=2, channels=(8, 8), size=(10, 6), pads=(0, 1, 2, 1)),
}


def direct_conv(x: np.ndarray, w: np.ndarray, pads: tuple[int, ...]) -> np.ndarray:
    """float64 reference: the direct 3×3 stride-1 convolution."""
    top, left, bottom, right = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    oh, ow = xp.shape[2] - 2, xp.shape[3] - 2
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for kh in range(3):
        for kw in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, kh : kh + oh, kw : kw + ow], w[:, :, kh, kw])
    return out


def _winograd_mod(shape: dict, tile: int) -> tvm.IRModule:
    (ci, co), (h, w) = shape["channels"], shape["size"]
    data = te.placeholder((shape["batch"], ci, h, w), name="data")
    packed = te.placeholder((tile + 2, tile + 2, ci, co), name="packed")
    out = winograd.conv2d_winograd(data, packed, shape["pads"], tile, "float32")
    return tvm.IRModule({"main": te.create_prim_func([data, packed, out])})


@pytest.mark.parametrize("tile", winograd.TILE_SIZES)
@pytest.mark.parametrize("name", list(SHAPES))
def test_winograd_equals_direct_within_tolerance(name: str, tile: int) -> None:
    shape = SHAPES[name]
    (ci, co), (h, w) = shape["channels"], shape["size"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((shape["batch"], ci, h, w)).astype("float32")
    weight = (rng.standard_normal((co, ci, 3, 3)) * np.sqrt(2 / (9 * ci))).astype("float32")
    reference = direct_conv(x, weight, shape["pads"])
    mod = _winograd_mod(shape, tile)
    packed = winograd.transform_weight(weight, tile)
    out = np.zeros(reference.shape, "float32")
    got = run(mod, [x, packed, out])
    assert np.abs(got - reference).max() <= winograd.atol(tile) * np.abs(reference).max()


@pytest.mark.slow
def test_a_generic_space_schedule_equals_direct() -> None:
    """A generic-space schedule of the task as bench/winograd.py tunes it (compiling its design
    space takes minutes on a loaded 2-core machine: slow)."""
    shape, tile = SHAPES["batch2-asym-pads"], 2
    (ci, co), (h, w) = shape["channels"], shape["size"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((shape["batch"], ci, h, w)).astype("float32")
    weight = rng.standard_normal((co, ci, 3, 3)).astype("float32") / 8
    reference = direct_conv(x, weight, shape["pads"])
    mod = winograd.without_custom_rules(_winograd_mod(shape, tile))
    target = make_target(None)
    context = s_tir.meta_schedule.TuneContext(
        mod=mod, target=target, space_generator=GenericSpace().generator(target), rand_state=1
    )
    space = context.generate_design_space()[0]
    out = np.zeros(reference.shape, "float32")
    got = run(space.mod, [x, winograd.transform_weight(weight, tile), out])
    assert np.abs(got - reference).max() <= winograd.atol(tile) * np.abs(reference).max()
