"""Real architectures from the onnx wheel's model zoo through ``tune_model``, default layout.

SqueezeNet (Concat of Fire branches) and ShuffleNet (grouped convs, channel shuffle, Sum) both
crashed Relax's ConvertLayout. Weights are seeded (bench/corpus/light.py): the wheel's are
ConstantOfShape fills, which would hide a wrong channel order. 2 trials per task and direct
convs only keep it short: SqueezeNet's eight 3×3 expand convs would add 16 Winograd tasks (the
longest test of the suite, 400 s), and tests/tuner/test_algorithms.py covers those.
"""

from __future__ import annotations

import pytest

from bench.corpus.light import light_dir, light_model
from convtune.schedules.ops.isa import vector_lanes
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.options import Algorithm, TuneOptions
from convtune.tuner.pipeline import tune_model
from convtune.tuner.target import make_target

pytestmark = pytest.mark.slow


def _events():
    seen: list[tuple[str, dict]] = []
    return seen, lambda event: seen.append((event.kind, event.as_dict()))


@pytest.mark.parametrize(
    ("name", "by_lanes"),
    [
        # every conv blocked (the stem NCHW in, blocked out; the 512→1000 classifier writes
        # half blocks of 8 on AVX-512): one transform, after the classifier
        ("light_squeezenet", {16: (26, 1), 8: (26, 1)}),
        # 28, 34 or 68 channels per group: NCHW; the 24-channel stem writes blocks of 8,
        # carried through its BatchNorm, ReLU and max pool to 56², and through the average
        # pool of the first shortcut. The 544-channel stage is in blocks of 8 (groups of 136),
        # its grouped convs, shuffles and depthwise convs blocked. The depthwise convs and the
        # strided average pools between NCHW grouped convs are blocked alone, each between
        # two register transposes (the channel shuffle before a depthwise conv merged into
        # the first), and each blocked shuffle is two of them: 23 blocked convs and 40
        # transforms on either target.
        ("light_shufflenet", {16: (23, 40), 8: (23, 40)}),
    ],
)
def test_light_zoo_model_tunes_and_verifies_blocked(
    name: str,
    by_lanes: dict[int, tuple[int, int]],
    tmp_path,
    sqlite_engine,
) -> None:
    blocked, transforms = by_lanes[vector_lanes(make_target())]
    ingested = load_model(light_model(light_dir() / f"{name}.onnx").SerializeToString(), name=name)
    seen, sink = _events()
    result = tune_model(
        ingested,
        tmp_path / "out",
        TuneOptions(trials_per_task=2, seed=0, algorithms=(Algorithm.DIRECT,)),
        engine=sqlite_engine,
        on_event=sink,
    )
    plan = result.manifest["layout_plan"]
    assert plan["fallbacks"] == [] and plan["fallback"] == ""
    assert plan["blocked_convs"] == blocked and plan["transforms"] == transforms
    assert all(c["layout"] != "NCHW" or c["reason"] for c in plan["convs"])
    assert result.manifest["verification"]["passed"]
    assert not [kind for kind, _ in seen if kind == "layout_fallback"]
    conv_layers = [row for row in result.manifest["layers"] if row["kind"] == "conv"]
    assert conv_layers and all("layout" in row["description"] for row in conv_layers)
