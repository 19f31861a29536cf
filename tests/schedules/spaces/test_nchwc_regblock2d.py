"""The 2-D register-blocked space for blocked convolutions: every design space's schedule equals
the unscheduled TIR, across the shapes ResNet-style networks have and some they do not."""

from __future__ import annotations

from functools import partial

import pytest
from tvm import s_tir

from convtune.schedules.ops.register_block import output_chunk_blocks, peeled_tiles
from convtune.schedules.spaces.nchwc_regblock import is_blocked_conv
from convtune.schedules.spaces.nchwc_regblock2d import (
    SPACE_NAME,
    RegisterBlock2DConvSpace,
    design_spaces,
    register_blocks,
)
from convtune.schedules.spaces.registry import SPACES, space_of
from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.target import make_target
from tests.models import conv_net, to_bytes
from tests.schedules.kernels import (
    AVX512,
    assert_close,
    check_peeled_columns,
    conv_task,
    random_args,
    run,
)

CONFIGS = {
    "1x1": dict(in_channels=32, out_channels=64, size=8, kernel=1, pads=0),
    "stride2-odd": dict(in_channels=16, out_channels=64, size=9, kernel=1, pads=0, strides=2),
    "padded": dict(in_channels=16, out_channels=32, size=5, kernel=1, pads=(1, 0, 0, 1)),
    "batch3-odd": dict(batch=3, in_channels=32, out_channels=32, size=7, kernel=1, pads=0),
    "no-epilogue": dict(in_channels=16, out_channels=64, size=6, kernel=1, pads=0, bias=False,
                        relu=False),
    "3x3-at-7": dict(in_channels=32, out_channels=64, size=7),
    "3x3-stride2-odd": dict(in_channels=16, out_channels=32, size=15, strides=2),
    "3x3-dilation2-batch2": dict(batch=2, in_channels=16, out_channels=32, size=10, dilations=2,
                                 pads=2),
    "3x3-groups2": dict(in_channels=64, out_channels=64, size=6, group=2),
}  # fmt: skip


#: Planned for AVX-512 (``kernels.AVX512``): 24 or 40 channels are blocked by 8, the others by 16.
MIXED_BLOCKS = {
    "16c-to-8c-1x1": dict(in_channels=144, out_channels=24, size=8, kernel=1, pads=0),
    "8c-to-16c-1x1": dict(in_channels=24, out_channels=144, size=6, kernel=1, pads=0),
    "8c-3x3-batch2": dict(batch=2, in_channels=40, out_channels=40, size=6),
    # 5 chunks of 8: only the odd block of 5 holds more than one.
    "5-chunks-1x1-at-13": dict(in_channels=16, out_channels=40, size=13, kernel=1, pads=0),
}


@pytest.mark.parametrize("name", [*CONFIGS, *MIXED_BLOCKS])
def test_every_design_space_equals_the_unscheduled_kernel(name: str) -> None:
    if name in MIXED_BLOCKS:
        task = conv_task(MIXED_BLOCKS[name], is_blocked_conv, AVX512)
    else:
        task = conv_task(CONFIGS[name], is_blocked_conv)
    assert RegisterBlock2DConvSpace().applies_to(task.mod)
    args = random_args(task.mod)
    reference = run(task.mod, args)
    spaces = design_spaces(s_tir.Schedule(task.mod, seed=1))
    assert len(spaces) >= 2  # at least two outer orders of one register block
    for sch in spaces:
        assert space_of(str(sch.trace.as_json()), SPACES) == SPACE_NAME
        assert_close(run(sch.mod, args), reference)


def test_applies_to_blocked_convs_with_more_than_one_chunk_or_row() -> None:
    # Planned for AVX-512 on any host: 16 channels are one chunk of 16 there, two of 8 on AVX2.
    three = conv_task(dict(in_channels=16, out_channels=32, size=6), is_blocked_conv, AVX512)
    assert RegisterBlock2DConvSpace().applies_to(three.mod)
    # One output-channel chunk and one row: only the 1-D block of nchwc_conv.py is left.
    single = conv_task(
        dict(in_channels=16, out_channels=16, size=1, kernel=1, pads=0), is_blocked_conv, AVX512
    )
    assert not RegisterBlock2DConvSpace().applies_to(single.mod)
    # Not a blocked conv at all (channels that do not divide stay NCHW).
    nchw = load_model(to_bytes(conv_net(in_channels=3, out_channels=20, size=8)))
    _, tasks = extract_tasks(nchw, make_target(AVX512), "nchwc")
    assert not any(RegisterBlock2DConvSpace().applies_to(task.mod) for task in tasks)


def test_odd_output_chunk_blocks_only_where_no_even_one_divides() -> None:
    assert output_chunk_blocks(8) == [1, 2, 4]
    assert output_chunk_blocks(6) == [1, 2]  # 2 divides: no 3
    assert output_chunk_blocks(125) == [1, 5]  # ImageNet's 1000 classes in chunks of 8
    assert output_chunk_blocks(15) == [1, 3, 5]
    assert output_chunk_blocks(7) == [1]
    assert register_blocks(5, 13) == [(5, 1)]


def test_peeled_tiles_only_where_no_divisor_fills_the_block() -> None:
    assert peeled_tiles(13, 7) == [1, 4, 5, 6, 7]  # 13 columns, two chunks on AVX2
    assert peeled_tiles(13, 3) == [1, 2, 3]
    assert peeled_tiles(14, 7) == []  # 7 divides 14: the perfect tiles serve
    assert peeled_tiles(13, 14) == []  # the whole row fits the block
    assert peeled_tiles(12, 14) == []


def test_a_peeled_column_tile_equals_the_unscheduled_kernel() -> None:
    """13×13 with 4 chunks of 16 (AVX-512 planning) in a 14-accumulator block (AVX2's): the
    columns of 2 chunks are 1, 4, 5, 6 or 7 wide, of 4 chunks 1, 2 or 3, the last tile partial
    but for 1; each such kernel computes the conv."""
    task = conv_task(dict(in_channels=32, out_channels=64, size=13), is_blocked_conv, AVX512)
    drawn = check_peeled_columns(task.mod, partial(design_spaces, max_block=14))
    # (2 chunks, 4 chunks) × two orders: 13 rows take no pairs of rows.
    assert sorted(drawn) == [0, 1, 2, 3]
    for index, widths in drawn.items():
        assert widths <= ({1, 4, 5, 6, 7}, {1, 2, 3})[index // 2]
    assert len(set().union(*drawn.values()) - {1}) >= 4
