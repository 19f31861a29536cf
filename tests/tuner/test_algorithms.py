"""Winograd as a build choice: its kernels are extracted as alternatives of the eligible convs,
the build picks per conv the fastest measured (bounded by streaming its weights), the artifact
matches onnxruntime, and a job can refuse Winograd."""

from __future__ import annotations

import json

import pytest

from convtune.tuner.algorithms import choose_winograd, weight_bytes
from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.options import Algorithm, TuneOptions
from convtune.tuner.pipeline import tune_model
from convtune.tuner.target import make_target
from tests.models import conv_net, to_bytes
from tests.schedules.kernels import AVX512

# 16 → 32 channels: blocked on AVX2 and AVX-512 hosts alike.
ELIGIBLE = dict(in_channels=16, out_channels=32, size=12, pads=1)


def _tasks(algorithms=tuple(Algorithm), **config):
    ingested = load_model(to_bytes(conv_net(**config)))
    return extract_tasks(ingested, make_target(AVX512), "nchwc", algorithms)


def test_an_eligible_conv_gets_one_winograd_task_per_tile() -> None:
    relax_model, tasks = _tasks(**ELIGIBLE)
    convs = [t for t in tasks if t.kind == "conv"]
    direct = [t for t in convs if t.algorithm is Algorithm.DIRECT]
    winograd = [t for t in convs if t.algorithm is Algorithm.WINOGRAD]
    assert len(direct) == 1 and direct[0].convs == [0]
    assert sorted(t.winograd_tile for t in winograd) == [2, 4]
    for task in winograd:
        assert task.convs == [0]
        assert task.onnx_nodes == direct[0].onnx_nodes == ["conv0"]
        assert task.shape_text == direct[0].shape_text
        assert task.as_dict()["algorithm"] == "winograd"
    # The model itself still computes the conv directly until the build chooses.
    assert relax_model.plan is not None
    assert relax_model.plan.convs[0].winograd_eligible
    assert relax_model.plan.convs[0].algorithm == "direct"


@pytest.mark.parametrize(
    ("config", "algorithms"),
    [
        (ELIGIBLE, (Algorithm.DIRECT,)),  # refused by the job
        ({**ELIGIBLE, "strides": 2}, tuple(Algorithm)),
        ({**ELIGIBLE, "kernel": 1, "pads": 0}, tuple(Algorithm)),
        ({**ELIGIBLE, "dilations": 2, "pads": 2}, tuple(Algorithm)),
    ],
    ids=["refused", "stride-2", "1x1", "dilated"],
)
def test_no_winograd_task_where_it_is_refused_or_cannot_apply(config, algorithms) -> None:
    _, tasks = _tasks(algorithms, **config)
    assert all(t.algorithm is Algorithm.DIRECT for t in tasks)
    assert any(t.kind == "conv" for t in tasks)


def test_the_fastest_candidate_wins_unless_its_weights_take_longer_to_stream() -> None:
    _, tasks = _tasks(**ELIGIBLE)
    by_tile = {t.winograd_tile: t for t in tasks if t.kind == "conv"}
    # 32·16 weights of 9 taps, of 4×4 transformed taps (F(2×2)), of 6×6 (F(4×4)).
    assert [weight_bytes(by_tile[t]) for t in (0, 2, 4)] == [18432, 32768, 73728]
    best = {by_tile[0].shash: 1.0, by_tile[2].shash: 0.8, by_tile[4].shash: 0.5}
    assert choose_winograd(tasks, best, bandwidth_gbs=100.0) == {0: 4}
    # At 0.05 GB/s F(4×4)'s 73.7 kB take 1.47 ms > direct's 1.0; F(2×2)'s 0.66 ms < its 0.8.
    assert choose_winograd(tasks, best, bandwidth_gbs=0.05) == {0: 2}
    assert choose_winograd(tasks, {**best, by_tile[0].shash: 0.4}, bandwidth_gbs=100.0) == {}
    # A task never measured is no candidate.
    unmeasured = {**best, by_tile[4].shash: None}
    assert choose_winograd(tasks, unmeasured, bandwidth_gbs=100.0) == {0: 2}


def test_options_parse_algorithms() -> None:
    assert Algorithm.parse_list("direct") == (Algorithm.DIRECT,)
    assert Algorithm.parse_list("winograd") == (Algorithm.DIRECT, Algorithm.WINOGRAD)
    assert TuneOptions.from_dict({"algorithms": ["direct"]}).algorithms == (Algorithm.DIRECT,)
    assert TuneOptions().algorithms == tuple(Algorithm)
    from convtune.tuner.errors import ConvtuneError

    with pytest.raises(ConvtuneError, match="unknown algorithm 'fft'"):
        Algorithm.parse_list("direct,fft")


@pytest.mark.slow
def test_a_tuned_model_builds_the_faster_algorithm_and_matches_onnxruntime(
    tmp_path, sqlite_engine
) -> None:
    """128 channels at 28×28: F(4×4) does a quarter of the direct conv's multiplies; with a few
    trials each, the build must pick the kernel measured fastest, whichever it is, and still match
    onnxruntime.
    (At 64 channels, timed with the weights cold, CI on Emerald Rapids once measured the direct
    kernel ahead: 0.203 ms against F(4×4)'s 0.209.)"""
    ingested = load_model(to_bytes(conv_net(in_channels=128, out_channels=128, size=28)))
    result = tune_model(
        ingested, tmp_path / "out", TuneOptions(trials_per_task=4), engine=sqlite_engine
    )
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["verification"]["passed"] is True
    conv_layers = {
        layer["winograd_tile"] or 0: layer["best_ms"]
        for layer in manifest["layers"]
        if layer["kind"] == "conv"
    }
    assert set(conv_layers) == {0, 2, 4}
    # Which one wins after 4 trials is the machine's call (CI on Zen 4 once measured the direct
    # kernel at 2.72 ms against F(2×2)'s 3.61 and F(4×4)'s 3.05): the build must follow it. The
    # weights (2.4 MB at most) load in well under a tenth of these times, so the bandwidth
    # floor of `choose_winograd` does not change the order.
    fastest = min(conv_layers, key=lambda tile: conv_layers[tile])
    plan = manifest["layout_plan"]["convs"][0]
    expected = "direct" if fastest == 0 else f"winograd F({fastest}x{fastest},3x3)"
    assert plan["algorithm"] == expected, conv_layers
    assert result.search.trials_measured > 0

    refused = tune_model(
        ingested,
        tmp_path / "direct",
        TuneOptions(trials_per_task=4, algorithms=(Algorithm.DIRECT,)),
        engine=sqlite_engine,
    )
    assert refused.manifest["layout_plan"]["convs"][0]["algorithm"] == "direct"
    assert all(layer["algorithm"] != "winograd" for layer in refused.manifest["layers"])
    assert refused.manifest["algorithms"] == ["direct"]
