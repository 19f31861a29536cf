"""bench/summary.py: the largest gaps per model and the corpus table's geometric mean."""

import math

import pytest

from bench.summary import ModelLine, gaps_markdown, summary_markdown, unmatched_ms
from convtune.tuner.peer_check import widest_gaps
from convtune.tuner.profile import ORT_OTHER, OUTSIDE_KERNELS


def row(layer: str, ms: float | None, ort_ms: float | None) -> dict:
    return {"layer": layer, "op": "Conv", "shape": f"shape of {layer}", "ms": ms, "ort_ms": ort_ms}


PROFILE = [
    row("conv_a", 2.0, 2.5),  # faster than its node: never a gap
    row("conv_b", 0.70, 0.50),
    row("conv_c", 0.15, 0.05),
    row("conv_d", 0.30, 0.10),
    row("conv_e", 0.11, 0.10),
    row("layout_transform", 0.34, None),
    row("fused_relu", 0.13, None),
    row(OUTSIDE_KERNELS, 0.9, None),
    row(ORT_OTHER, None, 14.0),
]


def test_the_three_largest_gaps_in_milliseconds_not_in_ratio():
    gaps = widest_gaps(PROFILE)
    # conv_c is the largest ratio (3x) but the smallest of the three in milliseconds
    assert [g.layer for g in gaps] == ["conv_d", "conv_b", "conv_c"]
    assert gaps[0].gap_ms == pytest.approx(0.20)


def test_kernels_without_a_node_are_summed_and_the_summary_rows_are_not():
    assert unmatched_ms(PROFILE) == pytest.approx(0.34 + 0.13)


def test_a_profile_where_every_layer_is_faster_says_so():
    lines = gaps_markdown([row("conv_a", 1.0, 2.0)])
    assert "No layer is slower than its onnxruntime node." in lines


def report(model: str, ours: float, ort: float, ov: float, spread: float = 0.05) -> dict:
    results = {
        "tuned": {"median_ms": ours, "spread": spread},
        "onnxruntime": {"median_ms": ort, "spread": 0.02},
        "openvino": {"median_ms": ov, "spread": 0.02},
    }
    return {
        "model": model,
        "machine": {"cpu": "AMD EPYC", "llvm_cpu": "znver3", "logical_cpus": 2},
        "bench_isolated": {"results": results},
        "profile": PROFILE,
    }


def test_each_model_is_judged_against_its_own_best_peer():
    line = ModelLine.from_report(report("det", ours=9.0, ort=12.0, ov=10.0))
    assert line.best_peer == "openvino"
    assert line.vs_best_peer == pytest.approx(0.9)
    line = ModelLine.from_report(report("rec", ours=3.0, ort=2.0, ov=4.0))
    assert (line.best_peer, line.vs_best_peer) == ("onnxruntime", pytest.approx(1.5))


def test_the_table_gives_the_geometric_mean_and_marks_a_disturbed_bench():
    md = "\n".join(
        summary_markdown(
            [report("det", 9.0, 12.0, 10.0), report("rec", 3.0, 2.0, 4.0, spread=0.6)], "corpus"
        )
    )
    assert f"**{math.sqrt(0.9 * 1.5):.2f}× the best peer**" in md
    assert "at or under 1.0×: 1 of 2" in md
    assert "| rec (disturbed) |" in md and "| det |" in md


def test_a_report_without_an_isolated_bench_is_refused():
    bad = report("det", 1.0, 1.0, 1.0)
    bad["bench_isolated"] = None
    with pytest.raises(ValueError, match="no isolated bench"):
        ModelLine.from_report(bad)
