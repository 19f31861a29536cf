"""The reduction-blocked space: every design space's schedule equals the unscheduled TIR, and the
space is offered only to convs with many input channels."""

from __future__ import annotations

from functools import partial

import pytest
from tvm import s_tir

from convtune.schedules.spaces.nchwc_kblock import (
    MIN_INPUT_BLOCKS,
    SPACE_NAME,
    ReductionBlockedConvSpace,
    design_spaces,
    input_blocks,
)
from convtune.schedules.spaces.nchwc_regblock import is_blocked_conv
from convtune.schedules.spaces.registry import SPACES, space_of
from tests.schedules.kernels import (
    AVX512,
    assert_close,
    check_peeled_columns,
    conv_task,
    random_args,
    run,
)

# Planned for AVX-512 (blocks of 16 channels): 512 input channels are MIN_INPUT_BLOCKS blocks.
CONFIGS = {
    "1x1": dict(in_channels=512, out_channels=64, size=7, kernel=1, pads=0),
    "1x1-stride2-odd": dict(in_channels=512, out_channels=32, size=9, kernel=1, pads=0,
                            strides=2),
    "3x3-padded-batch2": dict(batch=2, in_channels=512, out_channels=32, size=5),
    "no-epilogue": dict(in_channels=1024, out_channels=32, size=4, kernel=1, pads=0, bias=False,
                        relu=False),
    "3x3-groups2": dict(in_channels=1024, out_channels=64, size=4, group=2),
}  # fmt: skip


@pytest.mark.parametrize("name", CONFIGS)
def test_every_design_space_equals_the_unscheduled_kernel(name: str) -> None:
    task = conv_task(CONFIGS[name], is_blocked_conv, AVX512)
    assert ReductionBlockedConvSpace().applies_to(task.mod)
    args = random_args(task.mod)
    reference = run(task.mod, args)
    spaces = design_spaces(s_tir.Schedule(task.mod, seed=1))
    assert spaces
    for sch in spaces:
        assert space_of(str(sch.trace.as_json()), SPACES) == SPACE_NAME
        assert_close(run(sch.mod, args), reference)


def test_applies_from_the_minimum_of_input_channel_blocks() -> None:
    wide = conv_task(CONFIGS["1x1"], is_blocked_conv, AVX512)
    assert input_blocks(wide.mod) == MIN_INPUT_BLOCKS
    narrow = conv_task(
        dict(in_channels=256, out_channels=64, size=7, kernel=1, pads=0), is_blocked_conv, AVX512
    )
    assert input_blocks(narrow.mod) == MIN_INPUT_BLOCKS // 2
    assert not ReductionBlockedConvSpace().applies_to(narrow.mod)


def test_a_peeled_column_tile_equals_the_unscheduled_kernel() -> None:
    """13 columns of 2 chunks of 16 (AVX-512 planning) in AVX2's 14 accumulators: the
    columns are 1 or 4-7 wide (one chunk: the whole row), the last tile partial."""
    task = conv_task(
        dict(in_channels=512, out_channels=32, size=13, kernel=1, pads=0), is_blocked_conv, AVX512
    )
    drawn = check_peeled_columns(task.mod, partial(design_spaces, max_block=14), range(1, 6))
    # (1 chunk, 2 chunks) × 1 row: the 1-chunk block holds the whole row, a perfect tile.
    assert sorted(drawn) == [1]
    assert drawn[1] <= {1, 4, 5, 6, 7} and len(drawn[1] - {1}) >= 2
