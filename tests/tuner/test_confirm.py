"""Confirmation: a task's fastest records re-measured side by side before the build."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from convtune.db.models import CURRENT_TIMING, Timing, TuningRecordRow
from convtune.tuner.errors import ConvtuneError
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.measure.timers import rotating_rounds
from convtune.tuner.options import TuneOptions
from convtune.tuner.pipeline import TuneResult, prepare_model, tune_model
from convtune.tuner.search.confirm import (
    CONFIRM_MAX_SHARE,
    CONFIRM_SECONDS_PER_CANDIDATE,
    CONFIRM_WITHIN,
    Confirmation,
    ConfirmReport,
    _alternative_groups,
    _Candidate,
    _chunks,
    _plan_share,
    confirm_reserve_minutes,
    confirm_tasks,
    not_confirmed,
)
from tests.models import conv_net, three_conv_cnn, to_bytes


def test_a_convs_alternatives_are_measured_together_and_other_tasks_alone():
    tasks = [
        SimpleNamespace(convs=[0]),  # conv 0 direct
        SimpleNamespace(convs=[1, 3]),  # convs 1 and 3 share a direct task
        SimpleNamespace(convs=[]),  # pooling
        SimpleNamespace(convs=[0]),  # conv 0 as Winograd F(2×2)
        SimpleNamespace(convs=[3]),  # conv 3 alone as Winograd: joins 1 and 3
        SimpleNamespace(convs=[2]),
        SimpleNamespace(convs=[0]),  # conv 0 as Winograd F(4×4)
    ]
    assert sorted(_alternative_groups(tasks)) == [[0, 3, 6], [1, 4], [2], [5]]
    # A task that bridges two groups found earlier merges them.
    bridged = [SimpleNamespace(convs=c) for c in ([0], [1], [0, 1])]
    assert _alternative_groups(bridged) == [[0, 1, 2]]


def _rows(engine, timing: Timing) -> list[TuningRecordRow]:
    with Session(engine) as session:
        query = select(TuningRecordRow).where(TuningRecordRow.timing == timing.value)
        return list(session.scalars(query.order_by(TuningRecordRow.id)))


def _tune(ingested, out, engine, options: TuneOptions) -> tuple[TuneResult, list[str], dict]:
    """``tune_model`` with its events kept: (result, event kinds in order, last payload by kind)."""
    events: list[tuple[str, dict]] = []
    result = tune_model(
        ingested,
        out,
        options,
        engine=engine,
        on_event=lambda e: events.append((e.kind, e.as_dict())),
    )
    return result, [kind for kind, _ in events], dict(events)


@pytest.mark.slow
def _speed(row: TuningRecordRow) -> tuple[float, int]:
    return row.mean_sec, row.id


def test_the_build_uses_the_confirmed_records_and_a_rebuild_keeps_them(tmp_path, sqlite_engine):
    db_engine = sqlite_engine  # the storage contract is tested on PostgreSQL in tests/db
    ingested = load_model(to_bytes(three_conv_cnn()), name="cnn3")
    options = TuneOptions(trials_per_task=6, seed=2)
    result, kinds, payloads = _tune(ingested, tmp_path / "a", db_engine, options)
    confirmed = payloads["confirmed"]
    assert kinds.index("confirmed") < kinds.index("build_started")
    assert confirmed["tasks"], "six trials per task left no task with a rival to confirm"
    assert confirmed["summary"].startswith(f"{len(confirmed['tasks'])} task(s) re-measured")
    stored = _rows(db_engine, Timing.CONFIRMED)
    assert len(stored) == sum(t["candidates"] for t in confirmed["tasks"])
    trials = {row.id: row for row in _rows(db_engine, CURRENT_TIMING)}
    layers = {row["workload_id"]: row for row in result.manifest["layers"]}
    for task in confirmed["tasks"]:
        layer = layers[task["workload_id"]]
        # The build took the confirmed figure and record, re-measured from one of the trials.
        assert layer["confirmed"] is True
        assert layer["best_ms"] == pytest.approx(task["confirmed_ms"])
        chosen = next(row for row in stored if row.id == layer["record_id"])
        fastest = min(
            (r for r in trials.values() if r.workload_id == task["workload_id"] and r.mean_sec),
            key=_speed,
        )
        assert task["recorded_ms"] == pytest.approx(fastest.mean_sec * 1e3)
        assert (chosen.trace != fastest.trace) is task["changed"]
        mine = [r for r in stored if r.workload_id == task["workload_id"]]
        assert chosen.mean_sec == min(r.mean_sec for r in mine)
        # Only rivals near the fastest, and each space's own fastest, were compiled again.
        # Of this workload: every non-conv task's unscheduled record has the same empty trace.
        measured = [r for r in trials.values() if r.workload_id == task["workload_id"]]
        sources = [r for r in measured if any(r.trace == m.trace for m in mine)]
        space_best = {
            space: min((r for r in measured if r.space == space and r.mean_sec), key=_speed)
            for space in {r.space for r in measured if r.mean_sec}
        }
        assert all(
            r.mean_sec <= CONFIRM_WITHIN * fastest.mean_sec or r.trace == space_best[r.space].trace
            for r in sources
        )
        assert all(any(best.trace == m.trace for m in mine) for best in space_best.values())
    assert result.manifest["verification"]["passed"] is True

    # Nothing new measured: nothing re-measured, the same records, the same library.
    again, _, payloads = _tune(ingested, tmp_path / "b", db_engine, options)
    assert payloads["confirmed"]["tasks"] == []
    assert payloads["confirmed"]["summary"] == ConfirmReport().summary()
    assert len(_rows(db_engine, Timing.CONFIRMED)) == len(stored)
    assert again.manifest["build_key"] == result.manifest["build_key"]
    assert again.manifest["reused_from_artifact"] == result.artifact_id


@pytest.mark.slow
def test_a_confirmation_that_fails_leaves_the_build_to_the_fastest_trials(
    tmp_path, sqlite_engine, monkeypatch
):
    # Fault injection: the measuring child dies (as a kernel that crashes on load would make it).
    def dies(*args, **kwargs):
        raise ConvtuneError("confirm: the fastest kernels failed in its own process: killed")

    monkeypatch.setattr("convtune.tuner.pipeline.confirm_tasks", dies)
    ingested = load_model(to_bytes(conv_net(in_channels=4, out_channels=8)), name="c")
    result, _, payloads = _tune(
        ingested, tmp_path / "out", sqlite_engine, TuneOptions(trials_per_task=3)
    )
    said = payloads["confirmed"]
    assert said["tasks"] == [] and said["summary"].startswith("not confirmed (confirm: the")
    assert result.manifest["verification"]["passed"] is True
    assert not any(layer["confirmed"] for layer in result.manifest["layers"])
    assert _rows(sqlite_engine, Timing.CONFIRMED) == []


@pytest.mark.slow
def test_a_job_that_asks_for_no_confirmation_measures_nothing_again(tmp_path, sqlite_engine):
    ingested = load_model(to_bytes(conv_net(in_channels=4, out_channels=8)), name="c")
    options = TuneOptions(trials_per_task=4, confirm=False)
    result, kinds, payloads = _tune(ingested, tmp_path / "out", sqlite_engine, options)
    assert kinds.index("confirmed") < kinds.index("build_started")
    assert payloads["confirmed"] == {
        "summary": not_confirmed("the job asked for none"),
        "tasks": [],
        "out_of_time": [],
    }
    assert _rows(sqlite_engine, Timing.CONFIRMED) == []
    assert not any(layer["confirmed"] for layer in result.manifest["layers"])
    assert result.manifest["verification"]["passed"] is True


def test_rounds_rotate_and_a_group_shares_arguments_by_their_description():
    calls: list[tuple[str, object]] = []
    allocated: list[object] = []

    def alloc(info):
        allocated.append(info)
        return f"args{len(allocated)}"

    def run(module, args):
        calls.append((module, args))
        return float(len(calls))

    groups = [
        [
            {"library": "a", "args_info": [1]},
            {"library": "b", "args_info": [2]},
            {"library": "c", "args_info": [1]},
        ],
        [{"library": "d", "args_info": [1]}],
    ]
    times = rotating_rounds(groups, 3, load=str.upper, alloc=alloc, run=run)
    order = [module for module, _ in calls]
    assert order == ["A", "B", "C", "B", "C", "A", "C", "A", "B", "D", "D", "D"]
    # One allocation per distinct description in a group; the next group allocates its own.
    assert allocated == [[1], [2], [1]]
    assert dict(calls) == {"A": "args1", "B": "args2", "C": "args1", "D": "args3"}
    assert times == [[[1.0, 6.0, 8.0], [2.0, 4.0, 9.0], [3.0, 5.0, 7.0]], [[10.0, 11.0, 12.0]]]


def test_chunks_keep_groups_whole_and_stay_under_the_size_unless_a_group_is_larger():
    plans = [["a"] * 3, ["b"] * 2, ["c"] * 5, ["d"], ["e"] * 2]
    chunks = _chunks(plans, 5)  # type: ignore[arg-type]
    assert chunks == [[plans[0], plans[1]], [plans[2]], [plans[3], plans[4]]]
    assert _chunks([["x"] * 7], 5) == [[["x"] * 7]]  # type: ignore[list-item]
    assert _chunks([], 5) == []


def test_a_group_holds_the_model_time_of_its_fastest_record_times_its_occurrences():
    tasks = [SimpleNamespace(occurrences=1), SimpleNamespace(occurrences=1)]
    direct, winograd = SimpleNamespace(mean_sec=5e-4), SimpleNamespace(mean_sec=3e-4)
    alternatives = [_Candidate(0, direct), _Candidate(1, winograd)]  # type: ignore[arg-type]
    assert _plan_share(alternatives, tasks) == pytest.approx(3e-4)  # type: ignore[arg-type]
    repeated = [SimpleNamespace(occurrences=5)]
    rivals = [_Candidate(0, SimpleNamespace(mean_sec=1e-4))] * 2  # type: ignore[arg-type]
    assert _plan_share(rivals, repeated) == pytest.approx(5e-4)  # type: ignore[arg-type]


def test_the_search_leaves_confirmation_its_candidates_time_but_never_more_than_its_share():
    tasks = [SimpleNamespace()] * 10
    wanted = 10 * 3 * CONFIRM_SECONDS_PER_CANDIDATE / 60
    assert confirm_reserve_minutes(tasks, 60.0) == pytest.approx(wanted)  # type: ignore[arg-type]
    assert confirm_reserve_minutes(tasks, 1.0) == pytest.approx(CONFIRM_MAX_SHARE)  # type: ignore[arg-type]
    assert confirm_reserve_minutes(tasks, 0.0) == 0.0  # type: ignore[arg-type]


def test_the_summary_names_what_the_deadline_left_unconfirmed():
    done = Confirmation("conv_a", 1, 1.0, 0.9, 3, changed=True)
    assert ConfirmReport([done]).summary() == (
        "1 task(s) re-measured side by side, 1 chose another record than the fastest single "
        "measurement"
    )
    late = ConfirmReport([done], out_of_time=["conv_b", "conv_c"])
    assert late.summary().endswith("; 2 task(s) left unconfirmed: the budget ran out")
    assert ConfirmReport(out_of_time=["conv_b"]).summary().startswith("none confirmed; 1 task")


@pytest.mark.slow
def test_a_deadline_starts_no_chunk_it_cannot_finish_and_loses_no_task(tmp_path, sqlite_engine):
    ingested = load_model(to_bytes(three_conv_cnn()), name="cnn3")
    options = TuneOptions(trials_per_task=6, seed=2, confirm=False)
    _tune(ingested, tmp_path / "a", sqlite_engine, options)
    before = len(_rows(sqlite_engine, Timing.CONFIRMED))
    prepared = prepare_model(ingested, engine=sqlite_engine, target=None, stored_path=None)
    args = (prepared.tasks, prepared.workload_ids, prepared.database, prepared.target)

    late = confirm_tasks(*args, threads=2, deadline=time.monotonic())
    assert late.confirmations == [] and late.out_of_time, "no task had rivals to confirm"
    assert len(_rows(sqlite_engine, Timing.CONFIRMED)) == before == 0  # nothing measured
    assert len(set(late.out_of_time)) == len(late.out_of_time)

    on_time = confirm_tasks(*args, threads=2, deadline=time.monotonic() + 600)
    assert on_time.out_of_time == []
    assert sorted(c.task for c in on_time.confirmations) == sorted(late.out_of_time)
