"""The 2-D register-blocked space for blocked 1×1 convolutions: every design space's schedule
equals the unscheduled TIR, across the shapes ResNet-style networks have and some they do not."""

from __future__ import annotations

import pytest
from tvm import s_tir

from convtune.schedules.nchwc_conv import is_blocked_conv
from convtune.schedules.nchwc_conv2d import (
    SPACE_NAME,
    PointwiseConvSpace,
    design_spaces,
    is_blocked_pointwise_conv,
)
from convtune.schedules.registry import SPACES, space_of
from tests.schedules.kernels import assert_close, conv_task, random_args, run

CONFIGS = {
    "1x1": dict(in_channels=32, out_channels=64, size=8, kernel=1, pads=0),
    "stride2-odd": dict(in_channels=16, out_channels=64, size=9, kernel=1, pads=0, strides=2),
    "padded": dict(in_channels=16, out_channels=32, size=5, kernel=1, pads=(1, 0, 0, 1)),
    "batch3-odd": dict(batch=3, in_channels=32, out_channels=32, size=7, kernel=1, pads=0),
    "no-epilogue": dict(in_channels=16, out_channels=64, size=6, kernel=1, pads=0, bias=False,
                        relu=False),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_design_space_equals_the_unscheduled_kernel(name: str) -> None:
    task = conv_task(CONFIGS[name], is_blocked_pointwise_conv)
    assert PointwiseConvSpace().applies_to(task.mod)
    args = random_args(task.mod)
    reference = run(task.mod, args)
    spaces = design_spaces(s_tir.Schedule(task.mod, seed=1))
    assert len(spaces) >= 2  # at least two outer orders of one register block
    for sch in spaces:
        assert space_of(str(sch.trace.as_json()), SPACES) == SPACE_NAME
        assert_close(run(sch.mod, args), reference)


def test_applies_to_blocked_1x1_convs_only() -> None:
    three = conv_task(dict(in_channels=16, out_channels=32, size=6), is_blocked_conv)
    assert not PointwiseConvSpace().applies_to(three.mod)
    # One output-channel chunk and one row: only the 1-D block of nchwc_conv.py is left.
    single = conv_task(
        dict(in_channels=16, out_channels=16, size=1, kernel=1, pads=0), is_blocked_conv
    )
    assert is_blocked_pointwise_conv(single.mod)
    assert not PointwiseConvSpace().applies_to(single.mod)
