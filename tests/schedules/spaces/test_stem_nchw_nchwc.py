"""Convs with few input channels, compiled NCHW in, NCHW16c out
(schedules/spaces/stem_nchw_nchwc.py): the layout pass selects them, every design space equals
the unscheduled TIR, a tuned model equals onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session
from tvm import s_tir

from convtune.db.models import TuningRecordRow
from convtune.schedules.ops.stem import blocks_output_only, pack_weight
from convtune.schedules.spaces.registry import SPACES, space_of
from convtune.schedules.spaces.stem_nchw_nchwc import SPACE_NAME, StemConvSpace, design_spaces
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.options import TuneOptions
from convtune.tuner.pipeline import tune_model
from tests.models import conv_net, to_bytes
from tests.schedules.kernels import AVX512, assert_close, conv_task, random_args, run

CONFIGS = {
    "stem-7x7-s2": dict(in_channels=3, out_channels=32, size=19, kernel=7, strides=2, pads=3),
    "1-channel-asym-pads": dict(in_channels=1, out_channels=16, size=10, pads=(0, 1, 2, 1)),
    "batch2-odd": dict(batch=2, in_channels=5, out_channels=32, size=(9, 13), kernel=3, pads=1),
    "no-epilogue": dict(in_channels=3, out_channels=32, size=8, kernel=3, pads=0, bias=False,
                        relu=False),
    # squeeze-excitation's excitation: 20 channels no block divides, one pixel
    "se-excitation-pixel": dict(in_channels=20, out_channels=48, size=1, kernel=1, pads=0),
}  # fmt: skip


#: Planned for AVX-512 (``kernels.AVX512``): a 24-channel output is written in blocks of 8.
HALF_BLOCKS = {"rgb-to-24-half-block": dict(in_channels=3, out_channels=24, size=11, strides=2)}


@pytest.mark.parametrize("name", [*CONFIGS, *HALF_BLOCKS])
def test_every_design_space_equals_the_unscheduled_kernel(name: str) -> None:
    if name in HALF_BLOCKS:
        task = conv_task(HALF_BLOCKS[name], StemConvSpace().applies_to, AVX512)
        assert task.description["layout"] == "NCHW→NCHW8c"
    else:
        task = conv_task(CONFIGS[name], StemConvSpace().applies_to)
    args = random_args(task.mod)
    reference = run(task.mod, args)
    spaces = design_spaces(s_tir.Schedule(task.mod, seed=1))
    assert len(spaces) >= 4  # outer order x unrolled window column, per output-channel block
    for sch in spaces:
        assert space_of(str(sch.trace.as_json()), SPACES) == SPACE_NAME
        assert_close(run(sch.mod, args), reference)


def test_which_convs_are_output_blocked() -> None:
    assert blocks_output_only(3, 64, 1, 16)
    assert blocks_output_only(3, 24, 1, 8)  # 24 channels in half blocks (layout.channel_block)
    assert not blocks_output_only(32, 64, 1, 16)  # blocked on both sides (nchwc_conv.py)
    assert not blocks_output_only(8, 16, 8, 16)  # depthwise
    # An unblockable input is read NCHW only where it is one pixel (the layout pass says so).
    assert blocks_output_only(20, 480, 1, 16, unblockable_pixel=True)
    assert not blocks_output_only(20, 480, 1, 16)


def test_packed_weight_holds_output_channels_in_the_vector() -> None:
    weight = np.arange(32 * 3 * 2 * 2, dtype="float32").reshape(32, 3, 2, 2)
    packed = pack_weight(weight, 16)
    assert packed.shape == (2, 3, 2, 2, 16)
    assert packed[1, 2, 0, 1, 5] == weight[16 + 5, 2, 0, 1]


@pytest.mark.slow
def test_tuned_stem_model_matches_onnxruntime(tmp_path, db_engine) -> None:
    config = dict(batch=2, in_channels=3, out_channels=32, size=15, kernel=7, strides=2, pads=3)
    result = tune_model(
        load_model(to_bytes(conv_net(**config))),
        tmp_path / "out",
        TuneOptions(trials_per_task=2, layout="nchwc"),
        engine=db_engine,
    )
    assert result.manifest["verification"]["passed"] is True
    with Session(db_engine) as session:
        spaces = set(session.scalars(select(TuningRecordRow.space)))
    assert SPACE_NAME in spaces
