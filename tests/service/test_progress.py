"""Tuning progress as the CLI and the worker print it, driven by the engine's event payloads."""

from __future__ import annotations

import re

import pytest

from convtune.service.cli import Progress
from convtune.service.progress import TuneProgress
from convtune.tuner.events import CostModelWarmStart, SearchPlanned, TrialBatch


def _batch(index: int, trials: int, budget: int, best: float | None) -> TrialBatch:
    return TrialBatch(
        task_index=index, task=f"fused_conv{index}", op="Conv", shape="1x8x8x8",
        trials=trials, budget=budget, best_gflops=best,
        best_ms=0.01 if best else None, errors=0,
    )  # fmt: skip


def _planned(to_tune: int, trials: int, already_recorded: int) -> SearchPlanned:
    return SearchPlanned(tasks=2, to_tune=to_tune, trials=trials, already_recorded=already_recorded)


def test_overall_trials_eta_and_budget() -> None:
    state = TuneProgress(budget_minutes=10.0)
    state.started -= 60.0  # a minute in
    state.update(_planned(2, 8, 0))
    state.update(_batch(0, 2, 4, 12.5))
    assert (state.trials_done, state.trials_total) == (2, 8)
    # 2 trials a minute, 6 to go: 3 minutes, inside the 9 minutes of budget left.
    assert state.eta() == pytest.approx(180.0, abs=2.0)
    assert state.budget_left() == pytest.approx(540.0, abs=2.0)
    line = state.batch_line()
    assert re.match(
        r"trials 2/8 \(25%\) · elapsed 1:0[01] · budget left (9:00|8:59) · ETA (3:00|2:59) · ", line
    ), line
    assert "fused_conv0 (Conv 1x8x8x8) 2/4, best 12.5 GFLOP/s" in line
    state.update(_batch(1, 4, 4, None))
    assert state.trials_done == 6 and "best none yet" in state.batch_line()
    # A kernel without FLOPs (a pad) has a best time and no rate.
    pad = TrialBatch(
        task_index=1, task="fused_pad", op="pad", shape="1x4x8x8x16",
        trials=4, budget=4, best_gflops=None, best_ms=0.0123, errors=0,
    )  # fmt: skip
    state.update(pad)
    assert "fused_pad (pad 1x4x8x8x16) 4/4, best 0.0123 ms" in state.batch_line()


def test_resumed_run_counts_recorded_trials() -> None:
    state = TuneProgress()
    state.update(_planned(1, 4, 6))
    assert (state.trials_done, state.trials_total) == (6, 10)
    assert state.budget_left() is None and "budget" not in state.summary()


def test_piped_cli_prints_one_plain_line_per_batch(capsys: pytest.CaptureFixture[str]) -> None:
    progress = Progress(None, live=False)
    with progress:
        progress(_planned(2, 8, 0))
        for trials in (2, 4):
            progress(_batch(0, trials, 4, 10.0 + trials))
        # no line of its own
        progress(CostModelWarmStart(records=3, workloads=1, added=3, source="trained", seconds=0))
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3
    assert out[0].startswith("tuning 2 of 2 tasks · trials 0/8")
    assert out[1].startswith("trials 2/8") and out[2].startswith("trials 4/8")
    assert all("│" not in line and "┃" not in line for line in out)  # no table borders
