"""The register transposes into and out of channel blocks (schedules/ops/channel_blocking.py):
exact copies of numpy's transposes, whole tiles, pixel tails and batches, both directions; and
the copy from blocks of one width to another."""

from __future__ import annotations

import numpy as np
import pytest
from tvm import tirx
from tvm.ir import IRModule

from convtune.schedules.ops.annotations import SCHEDULED
from convtune.schedules.ops.channel_blocking import (
    channel_blocking_kernel,
    reblocking_kernel,
    transposable,
)
from tests.schedules.kernels import assembly, run


def _module(kernel: tirx.PrimFunc) -> IRModule:
    """``kernel`` alone, compiled as its own entry (Relax names it when it calls it)."""
    return IRModule({"main": kernel.with_attr("global_symbol", "main")})


def _blocked(x: np.ndarray, block: int) -> np.ndarray:
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


#: (NCHW shape, block, lanes): 16- and 8-channel blocks on AVX-512 (the latter half a register),
#: 8 and 4 on AVX2; planes of whole tiles, with a tail (14x14, 7x7), and with no whole tile.
CASES = [
    ((1, 32, 8, 8), 16, 16),
    ((1, 24, 14, 14), 8, 16),
    ((2, 32, 7, 7), 16, 16),
    ((1, 16, 3, 5), 8, 16),
    ((1, 16, 6, 6), 8, 8),
    ((1, 12, 5, 4), 4, 8),
]


@pytest.mark.parametrize(("shape", "block", "lanes"), CASES)
def test_the_transposes_copy_exactly(shape: tuple[int, ...], block: int, lanes: int) -> None:
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    into = channel_blocking_kernel(shape, block, lanes, to_blocked=True)
    blocked = run(_module(into), [x, np.zeros_like(_blocked(x, block))])
    np.testing.assert_array_equal(blocked, _blocked(x, block))
    back = channel_blocking_kernel(shape, block, lanes, to_blocked=False)
    np.testing.assert_array_equal(run(_module(back), [blocked, np.zeros_like(x)]), x)


@pytest.mark.parametrize(
    ("shape", "block", "groups"), [((1, 24, 5, 5), 8, 4), ((2, 32, 4, 4), 16, 2)]
)
def test_a_channel_shuffle_on_the_way_into_blocks(
    shape: tuple[int, ...], block: int, groups: int
) -> None:
    """ShuffleNet's shuffle (reshape to (g, C/g), swap, reshape back) and the blocking at once,
    batches included."""
    x = np.random.default_rng(1).standard_normal(shape).astype("float32")
    n, c, h, w = shape
    shuffled = x.reshape(n, groups, c // groups, h, w).transpose(0, 2, 1, 3, 4).reshape(shape)
    kernel = channel_blocking_kernel(shape, block, 16, to_blocked=True, shuffle_groups=groups)
    got = run(_module(kernel), [x, np.zeros_like(_blocked(x, block))])
    np.testing.assert_array_equal(got, _blocked(shuffled, block))


def test_a_kernel_is_built_scheduled_and_opaque() -> None:
    kernel = channel_blocking_kernel((1, 32, 8, 8), 16, 16, to_blocked=True)
    assert kernel.attrs[SCHEDULED] and int(kernel.attrs["op_pattern"]) == 8


def test_the_transpose_is_register_shuffles() -> None:
    """Whole registers in and out, permuted between: no float is moved alone (the tail aside,
    which this shape has not)."""
    asm = assembly(_module(channel_blocking_kernel((1, 32, 8, 8), 16, 16, to_blocked=True)))
    assert "vperm" in asm or "vunpck" in asm or "vshuf" in asm
    assert "vinsertps" not in asm and "vgather" not in asm


def test_only_fp32_blocks_of_a_register_or_half_of_one_are_transposed() -> None:
    assert transposable(16, 16, "float32") and transposable(8, 16, "float32")
    assert not transposable(4, 16, "float32")  # a quarter register: TVM's transform
    assert not transposable(16, 16, "int8") and not transposable(16, 16, "bfloat16")


@pytest.mark.parametrize(
    ("shape", "block", "new_block", "dtype"),
    [
        ((1, 48, 6, 5), 8, 16, "float32"),  # PP-OCRv6's 24 + 24 stem concat into 16-blocks
        ((2, 32, 5, 7), 16, 8, "float32"),  # a batch, and 16 → 8
        ((1, 64, 40, 40), 16, 8, "float32"),  # large enough for the parallel copy
        ((1, 32, 3, 3), 8, 16, "int8"),  # any dtype: a copy of runs
    ],
)
def test_a_reblocking_copies_exactly(
    shape: tuple[int, ...], block: int, new_block: int, dtype: str
) -> None:
    x = (np.random.default_rng(2).standard_normal(shape) * 50).astype(dtype)
    kernel = reblocking_kernel(shape, block, new_block, dtype)
    got = run(_module(kernel), [_blocked(x, block), np.zeros_like(_blocked(x, new_block))])
    np.testing.assert_array_equal(got, _blocked(x, new_block))
    asm = assembly(_module(kernel))
    assert "vinsertps" not in asm and "vgather" not in asm  # whole runs, no float alone
