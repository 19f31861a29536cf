"""The task scheduler: TVM's gradient choice, and no batch generated while another is in flight."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from sqlalchemy import func, select
from tvm.s_tir.meta_schedule.runner import RunnerResult

from convtune.db.migrate import upgrade
from convtune.db.models import TuningRecordRow
from convtune.db.ms_database import SQLDatabase
from convtune.db.session import make_engine
from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.options import Layout
from convtune.tuner.search import driver as search
from convtune.tuner.search.task_scheduler import (
    ExclusiveGradient,
    batch_seconds,
    best_seconds,
    gradient,
)
from convtune.tuner.target import make_target
from tests.models import three_conv_cnn, to_bytes


def test_best_seconds_takes_the_fastest_median_and_skips_failures() -> None:
    results = [
        RunnerResult([3e-3, 1e-3, 2e-3], None),  # median 2 ms
        RunnerResult([5e-4, 9e-3, 9e-3], None),  # a fast outlier: median 9 ms
        RunnerResult(None, "run failed"),
    ]
    assert best_seconds(results) == pytest.approx(2e-3)
    assert best_seconds([RunnerResult(None, "build failed")]) >= 1e9


def test_gradient_prefers_heavy_slow_improving_tasks_and_puts_failed_ones_last() -> None:
    # One batch each: best / batches, times the weight (occurrences in the model).
    assert gradient([4e-3], 1.0) > gradient([1e-3], 1.0)
    assert gradient([1e-3], 5.0) > gradient([4e-3], 1.0)
    # After WINDOW+1 batches the recent slope counts: a task still improving beats a flat one.
    improving, flat = [8e-3, 6e-3, 4e-3, 2e-3], [2e-3, 2e-3, 2e-3, 2e-3]
    assert gradient(improving, 1.0) > gradient(flat, 1.0)
    assert gradient([1e9], 100.0) < gradient([1e-6], 1.0)
    assert gradient([], 1.0) < gradient([1e-6], 1.0)


def test_the_choice_weighs_the_gradient_by_what_a_batch_costs() -> None:
    assert batch_seconds([]) == 1.0
    assert batch_seconds([9.0, 100.0, 2.0, 3.0]) == 3.0  # median of the last WINDOW
    scheduler = ExclusiveGradient._cls(seed=0)  # the Python class behind TVM's derived object
    tasks = [SimpleNamespace(task_weight=1.0, is_terminated=False) for _ in range(3)]
    scheduler._first_round = len(tasks)
    # Task 0 gains twice as much per batch, but its batches take 50 times longer (a Winograd
    # F(4×4) compile against a direct conv's); task 2 never ran.
    scheduler._history = {0: [8e-3], 1: [4e-3], 2: [1e9]}
    scheduler._durations = {0: [100.0], 1: [2.0], 2: [0.5]}
    assert scheduler._choose(tasks, [0, 1, 2]) == 1
    scheduler._durations = {0: [3.0], 1: [2.0], 2: [0.5]}
    assert scheduler._choose(tasks, [0, 1, 2]) == 0
    # The first round still gives every task its batch, in order, whatever it costs.
    scheduler._first_round = 0
    assert [scheduler._choose(tasks, [0, 1, 2]) for _ in tasks] == [0, 1, 2]


def test_every_batch_is_recorded_before_the_next_is_generated(tmp_path, monkeypatch) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url)
    engine = make_engine(url)
    target = make_target(None)
    _, tasks = extract_tasks(load_model(to_bytes(three_conv_cnn())), target, Layout.NCHW)
    database = SQLDatabase(engine, target)

    def recorded() -> int:
        with engine.connect() as connection:
            return int(connection.scalar(select(func.count()).select_from(TuningRecordRow)) or 0)

    generated: list[int] = []
    seen_at_generation: list[int] = []
    inner = search.BudgetedSearch._cls  # the Python class behind TVM's derived object
    original = inner.generate_measure_candidates

    def spy(self):  # type: ignore[no-untyped-def]
        seen_at_generation.append(recorded())
        candidates = original(self)
        generated.append(len(candidates or []))
        return candidates

    monkeypatch.setattr(inner, "generate_measure_candidates", spy)
    result = search.run_search(tasks, database, target, trials_per_task=4, threads=1, seed=1)
    engine.dispose()

    conv_tasks = sum(task.kind in ("conv", "gemm") for task in tasks)
    assert conv_tasks >= 3 and result.trials_measured >= conv_tasks
    assert not result.stopped_early and result.reason.startswith("every task converged")
    # MetaSchedule's GradientBased generates every task's first batch before recording any:
    # there the second generation would see 0 records.
    assert len(generated) > conv_tasks
    assert seen_at_generation == [sum(generated[:k]) for k in range(len(generated))]
