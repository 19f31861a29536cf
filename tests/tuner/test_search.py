"""Search planning and limits: budgets that count recorded trials, the clock, stop requests."""

from __future__ import annotations

import time

import pytest

from convtune.db.migrate import upgrade
from convtune.db.ms_database import SQLDatabase
from convtune.db.session import make_engine
from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.options import Layout
from convtune.tuner.search.allocation import plan_search
from convtune.tuner.search.budget import TrialBudget
from convtune.tuner.search.driver import SearchResult, run_search
from convtune.tuner.target import make_target
from tests.models import conv_net, maxpool_model, to_bytes


@pytest.fixture
def setup(tmp_path):
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url)
    engine = make_engine(url)
    target = make_target(None)
    ingested = load_model(to_bytes(conv_net(in_channels=3, out_channels=8, size=8)))
    _, tasks = extract_tasks(ingested, target, Layout.NCHW)
    yield tasks, SQLDatabase(engine, target), target
    engine.dispose()


def _record(database: SQLDatabase, workload_id: int, n: int) -> None:
    for i in range(n):
        database.records.record_trial(
            workload_id, trace_json=[[], [i]], run_secs=[1e-3], args_info_json=[],
            error=None, trial_index=i, space="generic", job_id=None, flops=1.0,
        )  # fmt: skip


def test_plan_counts_recorded_trials_unless_retuning(setup) -> None:
    tasks, database, _ = setup
    plan = plan_search(tasks, database, 10, retune=False)
    conv = next(i for i, t in enumerate(tasks) if t.kind == "conv")
    assert plan.budgets[conv] == 10
    _record(database, plan.workload_ids[conv], 4)
    resumed = plan_search(tasks, database, 10, retune=False)
    assert resumed.done_before[conv] == 4 and resumed.remaining(conv) == 6
    retuned = plan_search(tasks, database, 10, retune=True)
    assert retuned.remaining(conv) == 10
    _record(database, plan.workload_ids[conv], 8)
    assert plan_search(tasks, database, 10, retune=False).remaining(conv) == 0


def test_budget_stops_at_the_deadline_and_on_request(setup) -> None:
    tasks, database, _ = setup
    plan = plan_search(tasks, database, 5, retune=False)
    result = SearchResult()
    budget = TrialBudget(plan, database, time.monotonic() + 3600, None, result)
    assert budget.allowance(0) == plan.budgets[0]
    budget.caps = {0: 2}
    assert budget.allowance(0) == 2
    budget.caps = {}  # a pass that does not include the task
    assert budget.allowance(0) == 0
    budget.caps = None
    budget.counts[0] = plan.budgets[0]
    assert budget.allowance(0) == 0 and not result.stopped_early

    late = TrialBudget(plan, database, time.monotonic() - 1, None, result)
    assert late.allowance(0) == 0
    assert result.stopped_early and result.reason == "time budget reached"

    stopped = SearchResult()
    asked = TrialBudget(plan, database, None, lambda: True, stopped)
    assert asked.allowance(0) == 0 and stopped.reason == "stop requested"


def test_a_search_with_every_trial_recorded_measures_nothing(setup) -> None:
    tasks, database, target = setup
    plan = plan_search(tasks, database, 2, retune=False)
    for wid, budget in zip(plan.workload_ids, plan.budgets, strict=True):
        _record(database, wid, budget)
    events: list[str] = []
    result = run_search(
        tasks, database, target, trials_per_task=2, threads=1,
        on_event=lambda event: events.append(event.kind),
    )  # fmt: skip
    assert result.trials_measured == 0
    assert result.reason == "every task already has its trials"
    assert events == ["search_planned"]


def test_a_zero_minute_budget_measures_nothing_and_says_why(setup) -> None:
    tasks, database, target = setup
    result = run_search(tasks, database, target, trials_per_task=4, threads=1, budget_minutes=0)
    assert result.trials_measured == 0
    assert result.stopped_early and result.reason == "time budget reached"


def test_a_workload_exhausted_under_the_same_spaces_is_not_planned_again(setup) -> None:
    from convtune.schedules.spaces.registry import SPACES
    from convtune.tuner.search.budget import exhaustion_key

    tasks, database, _ = setup
    key = exhaustion_key(SPACES)
    plan = plan_search(tasks, database, 10, retune=False, searched_key=key)
    conv = next(i for i, t in enumerate(tasks) if t.kind == "conv")
    _record(database, plan.workload_ids[conv], 2)
    database.records.mark_exhausted(plan.workload_ids[conv], key)
    assert plan_search(tasks, database, 10, retune=False, searched_key=key).remaining(conv) == 0
    # Another set of spaces (or another version) may have schedules this one had not.
    other = exhaustion_key(SPACES[:1])
    assert other != key
    assert plan_search(tasks, database, 10, retune=False, searched_key=other).remaining(conv) > 0
    assert plan_search(tasks, database, 10, retune=True, searched_key=key).remaining(conv) > 0


def test_the_first_seed_round_covers_every_task_with_a_seeded_space(tmp_path) -> None:
    """One seed pass per round, not per space: the depthwise tasks of a mobile block are seeded in
    the first round next to the 1×1 convs (a time budget spent on the first spaces starved them),
    and a space a task already has trials of is not seeded again."""
    from convtune.schedules.spaces.depthwise_nchwc import DepthwiseConvSpace
    from convtune.schedules.spaces.nchwc_regblock import RegisterBlockedConvSpace
    from convtune.schedules.spaces.nchwc_regblock2d import RegisterBlock2DConvSpace
    from convtune.schedules.spaces.registry import SPACES
    from convtune.tuner.search.driver import seed_rounds
    from tests.models import inverted_residual_net

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url)
    engine = make_engine(url)
    target = make_target(None)
    _, tasks = extract_tasks(
        load_model(to_bytes(inverted_residual_net(batch=1))), target, Layout.NCHWC
    )
    database = SQLDatabase(engine, target)
    plan = plan_search(tasks, database, 8, retune=False)
    active = list(range(len(tasks)))
    rounds = seed_rounds(plan, active, database, {i: SPACES for i in active})
    seeded_anywhere = {i for r in rounds for i in r}
    assert seeded_anywhere, "no task of the mobile block has a seeded space"
    assert set(rounds[0]) == seeded_anywhere
    depthwise = {i for i in seeded_anywhere if rounds[0][i].name == DepthwiseConvSpace.name}
    assert depthwise, [(tasks[i].name, s.name) for i, s in rounds[0].items()]
    for r in rounds:
        for i, space in r.items():
            assert space.applies_to(tasks[i].mod) and space.seed_trials > 0
    # Each (task, space) pair once, in registry order within a task but for a space that seeds
    # first: the 2-D register block on every conv it applies to, the 1-D one after it.
    pairs = [(i, space.name) for r in rounds for i, space in r.items()]
    assert len(pairs) == len(set(pairs))
    two_d, one_d = RegisterBlock2DConvSpace(), RegisterBlockedConvSpace()
    blocked = [i for i in seeded_anywhere if two_d.applies_to(tasks[i].mod)]
    assert blocked, "the mobile block's blocked convs"
    for i in blocked:
        assert two_d.seeds_first(tasks[i].mod)
        assert rounds[0][i].name == two_d.name, (tasks[i].name, rounds[0][i])
        if one_d.applies_to(tasks[i].mod):
            order = [r[i].name for r in rounds if i in r]
            assert order.index(one_d.name) > 0, (tasks[i].name, order)
    first, space = next(iter(rounds[0].items()))
    database.records.record_trial(
        plan.workload_ids[first], trace_json=[[], [0]], run_secs=[1e-3], args_info_json=[],
        error=None, trial_index=0, space=space.name, job_id=None, flops=1.0,
    )  # fmt: skip
    again = seed_rounds(plan, active, database, {i: SPACES for i in active})
    assert (first, space.name) not in [(i, s.name) for r in again for i, s in r.items()]
    engine.dispose()


def test_a_task_stopped_for_lack_of_progress_is_not_planned_again(setup) -> None:
    """Early stop persists: a workload whose best did not improve in PATIENCE_BATCHES batches
    gets no trials from the same command again (a re-upload measures nothing), but does from a
    retune or under other spaces."""
    from convtune.schedules.spaces.registry import SPACES
    from convtune.tuner.search.budget import PATIENCE_BATCHES, exhaustion_key

    tasks, database, _ = setup
    key = exhaustion_key(SPACES)
    plan = plan_search(tasks, database, 10, retune=False, searched_key=key)
    conv = next(i for i, t in enumerate(tasks) if t.kind == "conv")
    _record(database, plan.workload_ids[conv], 2)
    budget = TrialBudget(plan, database, None, None, SearchResult(), searched_key=key)
    # Seed passes (caps set) never stop a task.
    budget.caps = {conv: 4}
    assert not any(budget.batch_measured(conv, 1e-3) for _ in range(PATIENCE_BATCHES + 1))
    assert database.records.exhausted_key(plan.workload_ids[conv]) is None
    budget.caps = None
    stops = [budget.batch_measured(conv, 1e-3) for _ in range(PATIENCE_BATCHES)]
    assert stops == [False] * (PATIENCE_BATCHES - 1) + [True]
    assert budget.allowance(conv) == 0
    assert database.records.exhausted_key(plan.workload_ids[conv]) == key
    assert plan_search(tasks, database, 10, retune=False, searched_key=key).remaining(conv) == 0
    assert plan_search(tasks, database, 10, retune=True, searched_key=key).remaining(conv) > 0
    other = exhaustion_key(SPACES[:1])
    assert plan_search(tasks, database, 10, retune=False, searched_key=other).remaining(conv) > 0


def test_floor_candidates_are_the_unscheduled_function_and_the_default_rule() -> None:
    """A non-anchor task's floor: its function unscheduled (an empty trace) and the default
    rule's schedule, each recorded under the ``default`` space; a function the rule declines
    (softmax) has the first only."""
    from tvm import te, topi
    from tvm.ir import IRModule

    from convtune.schedules.spaces.registry import SPACES
    from convtune.schedules.untuned import DEFAULT_SCHEDULE
    from convtune.tuner.search.recording import floor_candidates, trial_space

    x = te.placeholder((1, 4, 28, 28, 16), name="x")
    pool = topi.nn.pool2d(x, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), "max", layout="NCHW16c")
    pooling = IRModule({"main": te.create_prim_func([x, pool])})
    unscheduled, rule = floor_candidates(pooling, 16)
    assert not unscheduled.sch.trace.insts and rule.sch.trace.insts
    for candidate in (unscheduled, rule):
        trace = str(candidate.sch.trace.as_json())
        assert trial_space(candidate.sch, trace, SPACES) == DEFAULT_SCHEDULE
        assert [list(a.shape) for a in candidate.args_info] == [
            [1, 4, 28, 28, 16],
            [1, 4, 14, 14, 16],
        ]
    row = te.placeholder((4, 1000), name="row")
    softmax = IRModule({"main": te.create_prim_func([row, topi.nn.softmax(row)])})
    assert len(floor_candidates(softmax, 16)) == 1


def test_a_task_whose_unscheduled_floor_was_measured_gets_the_rules_floor_next(setup) -> None:
    """A database from before the default rule was a floor: the task's unscheduled function is
    recorded; the next search measures the rule's schedule, and not the unscheduled one again."""
    from convtune.schedules.untuned import DEFAULT_SCHEDULE, default_schedule
    from convtune.tuner.search.budget import ANCHOR_KINDS

    _, database, target = setup
    _, tasks = extract_tasks(load_model(to_bytes(maxpool_model())), target, Layout.NCHWC)
    others = [t for t in tasks if t.kind not in ANCHOR_KINDS]
    others = [t for t in others if default_schedule(t.mod["main"], 16) is not None]
    assert others, [t.kind for t in tasks]
    plan = plan_search(others, database, 4, retune=False)
    for wid in plan.workload_ids:
        database.records.record_trial(
            wid, trace_json=[[], []], run_secs=[1.0], args_info_json=[], error=None,
            trial_index=0, space=DEFAULT_SCHEDULE, job_id=None, flops=1.0,
        )  # fmt: skip
    run_search(others, database, target, trials_per_task=4, threads=1)
    for wid in plan.workload_ids:
        floors = [r for r in database.records.all_records() if r.workload_id == wid]
        floors = [r for r in floors if r.space == DEFAULT_SCHEDULE]
        assert len(floors) == 2, [r.trace for r in floors]
