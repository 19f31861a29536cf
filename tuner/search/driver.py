"""Search: MetaSchedule's task scheduler over every task of a model, recording into our database.

What convtune adds to a plain ``ms.tune_tasks`` call:
- per-task trial budgets that count the trials already in the database, so a killed run resumes
  where it stopped and a workload tuned before (by any model) is not searched again;
- a wall-clock budget and a stop request, both checked after every measured batch;
- every trial (failed ones too, with their error) recorded with its index, space and job;
- the XGBoost cost model of the target (``cost_model.py``: trained on every workload's records,
  persisted) warm before the first new measurement, and updated with this search's trials after;
- trials allocated by expected gain: (the task's share of the model's time) × (its distance from
  the best GFLOP/s known for its kind of workload, or from peak), largest first;
- a task whose best has not improved for ``PATIENCE_BATCHES`` batches stops, and its unspent
  trials go to the tasks still improving;
- measurements taken with the thread count the artifact will run with.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.cost_model import XGBModel
from tvm.s_tir.meta_schedule.space_generator import SpaceGenerator
from tvm.target import Target

from convtune.db.ms_database import SQLDatabase
from convtune.schedules.spaces.base import DEFAULT_SPACE, ScheduleSpace
from convtune.schedules.spaces.registry import SPACES, union_space
from convtune.tuner.errors import ConvtuneError, error_line
from convtune.tuner.events import (
    CostModelSaved,
    CostModelWarmStart,
    EventSink,
    SearchFallback,
    SearchPlanned,
    SpaceDropped,
    emit,
)
from convtune.tuner.graph.extract import ModelTask
from convtune.tuner.measure.fleet import Fleet
from convtune.tuner.measure.results import peak_for_threads, stored_peak
from convtune.tuner.measure.runner import make_runner, shutdown_runner
from convtune.tuner.measure.timers import EVALUATOR
from convtune.tuner.search.allocation import (
    ALLOCATION_CAP,
    ALLOCATION_FLOOR,
    SearchPlan,
    plan_search,
)
from convtune.tuner.search.budget import (
    MIN_GAIN,
    PATIENCE_BATCHES,
    SearchResult,
    TrialBudget,
    exhaustion_key,
)
from convtune.tuner.search.builder import CandidateBuilder
from convtune.tuner.search.cost_model import CostModelStore, TrainCadence
from convtune.tuner.search.recording import RecordTrials
from convtune.tuner.search.space_check import (
    TaskSpaces,
    check_task_spaces,
)
from convtune.tuner.search.strategy import BudgetedSearch, evolutionary_search
from convtune.tuner.search.task_scheduler import ExclusiveGradient

#: Largest batch a task measures at once.
MAX_BATCH = 16
#: Trials a task without a seeded space gets in the first seed round.
FIRST_ROUND_TRIALS = 8


def seed_rounds(
    plan: SearchPlan,
    active: Sequence[int],
    database: SQLDatabase,
    spaces_of: Mapping[int, Sequence[ScheduleSpace]],
) -> list[dict[int, ScheduleSpace]]:
    """The seed passes to run: round k maps each task index of ``active`` (in its order) to the
    k-th space of ``spaces_of[i]`` with ``seed_trials`` that applies to it and has no trial of it
    yet (a task resumed or tuned before already had that seed pass); spaces that seed first on
    the task (``ScheduleSpace.seeds_first``) come before the others."""

    def seeds_of(i: int) -> list[ScheduleSpace]:
        mod = plan.tasks[i].mod
        todo = [
            space
            for space in spaces_of[i]
            if space.seed_trials > 0
            and space.applies_to(mod)
            and database.records.count_trials(plan.workload_ids[i], space.name) == 0
        ]
        return sorted(todo, key=lambda space: not space.seeds_first(mod))

    pending = {i: seeds_of(i) for i in active}
    depth = max((len(todo) for todo in pending.values()), default=0)
    return [{i: todo[k] for i, todo in pending.items() if k < len(todo)} for k in range(depth)]


def run_search(
    tasks: Sequence[ModelTask],
    database: SQLDatabase,
    target: Target,
    *,
    trials_per_task: int,
    threads: int,
    budget_minutes: float | None = None,
    seed: int = 0,
    retune: bool = False,
    job_id: int | None = None,
    spaces: Sequence[ScheduleSpace] = SPACES,
    on_event: EventSink | None = None,
    should_stop: Callable[[], bool] | None = None,
    fleet: Fleet | None = None,
) -> SearchResult:
    """Tune every task that still has budget; returns what was measured and why it stopped.

    First seed rounds: each space with ``seed_trials`` gets that many trials alone on every task
    it applies to that never had a trial of it; round k searches each task in its k-th such
    space, so one pass covers every task (a pass per space let the first spaces spend a time
    budget while a later space, the depthwise one on MobileNetV2, never ran). Then one pass
    over the union of each task's applicable ``spaces``, started from the best records so far.
    """
    # The clock starts here: the budget covers planning, the space checks and the cost model's
    # warm start, not only the trials after them.
    deadline = time.monotonic() + budget_minutes * 60.0 if budget_minutes is not None else None
    result = SearchResult()
    peak = stored_peak(database.records.engine, target)
    # Marks workloads exhausted or converged under these spaces, and skips them next time.
    searched_key = exhaustion_key(spaces)
    plan = plan_search(
        tasks,
        database,
        trials_per_task,
        retune=retune,
        peak_gflops=peak_for_threads(peak, threads) if peak is not None else None,
        searched_key=searched_key,
    )
    # Largest expected gain first: the gradient scheduler's first round follows this order, and
    # if the time budget runs out the tasks that pay most got their trials.
    # Alternatives (Winograd) after every other task: a conv's direct kernel is measured before
    # its alternatives are, and a budget spent on F(4×4) batches (1–2 minutes each for 8 trials
    # of ResNet-18's, most of it compiling) does not leave other tasks unmeasured (10 of
    # ResNet-18's tasks were, with a 10-minute budget: 27.8 ms against 17.4 for onnxruntime).
    active = sorted(
        (i for i in range(len(plan.tasks)) if plan.remaining(i) > 0),
        key=lambda i: (
            plan.tasks[i].is_alternative,
            -(plan.outlooks[i].gain if plan.outlooks[i] else 0.0),
        ),
    )
    emit(on_event, planned_event(plan, active))
    if not active:
        result.reason = "every task already has its trials"
        return result
    # Each task searches the spaces that generate designs for it; one that raises is dropped
    # for that task alone (space_check.py), and a task left with none builds unscheduled.
    task_spaces = check_task_spaces(
        [(i, plan.tasks[i].name, plan.tasks[i].mod) for i in active], target, spaces, seed
    )
    result.dropped = task_spaces.dropped  # the same list: drops during the search join it
    for dropped in task_spaces.dropped:
        emit(on_event, SpaceDropped(**dropped.as_dict()))
    active = [i for i in active if task_spaces.of(i)]
    if not active:
        result.reason = "no schedule space could generate designs for the tasks left"
        return result
    # The runner's worker process inherits this: it measures with the artifact's thread count.
    os.environ["TVM_NUM_THREADS"] = str(threads)
    budget = TrialBudget(plan, database, deadline, should_stop, result, searched_key)

    store = CostModelStore(database, seed=seed, threads=threads)
    warm = store.warm()
    if warm.source != "loaded" and warm.added:
        store.save(warm)  # The next job only adds the records measured after this one.
    emit(on_event, CostModelWarmStart(**warm.as_event()))

    def search_pass(
        tasks: list[int], space_for: Callable[[int], SpaceGenerator], union: bool = False
    ) -> None:
        run_pass = partial(
            _search_pass, plan, budget=budget, database=database, target=target,
            cost_model=warm.model, threads=threads, seed=seed, job_id=job_id, spaces=spaces,
            task_spaces=task_spaces, on_event=on_event, fleet=fleet, union=union,
        )  # fmt: skip
        try:
            run_pass(tasks, space_for=space_for)
        except ConvtuneError:
            raise
        except Exception as exc:
            # A failure no check foresaw (a space's design raising for some sampled decisions
            # only): what was measured is recorded; the pass's tasks go on in the generic space.
            why = f"search pass failed ({error_line(exc)}): its tasks continue in the generic space"
            emit(on_event, SearchFallback(message=why, tasks=len(tasks)))
            for i in tasks:
                for space in task_spaces.of(i):
                    if space.name != DEFAULT_SPACE:
                        dropped = task_spaces.drop(
                            i, plan.tasks[i].name, space.name, f"its pass failed: {error_line(exc)}"
                        )
                        if dropped is not None:
                            emit(on_event, SpaceDropped(**dropped.as_dict()))
            left = [i for i in tasks if task_spaces.of(i) and budget.allowance(i) > 0]
            if not left:
                return
            try:
                run_pass(left, space_for=union_for)
            except ConvtuneError:
                raise
            except Exception as exc2:
                # What was measured stands; the build uses it and TVM's default elsewhere.
                budget.halted = f"search stopped: {error_line(exc2)}"
                emit(on_event, SearchFallback(message=budget.halted, tasks=len(left)))

    def union_for(i: int) -> SpaceGenerator:
        return union_space(plan.tasks[i].mod, target, task_spaces.of(i))

    rounds = seed_rounds(plan, active, database, task_spaces.spaces)
    # Tasks no seeded space applies to (a Gemm, elementwise ops) join the first seed round in
    # their union space: a time budget spent on seeds must not leave them unmeasured (the
    # 1000-class Gemm of ResNet-50, untuned, took 2.8 ms of 37).
    unseeded = [i for i in active if not any(i in r for r in rounds)]
    for k, seed_round in enumerate(rounds):
        first = {i: FIRST_ROUND_TRIALS for i in unseeded} if k == 0 else {}
        # A space dropped for a task in an earlier round (all its candidates failed) is not seeded.
        seed_round = {i: sp for i, sp in seed_round.items() if sp in task_spaces.of(i)}
        caps = {i: space.seed_trials for i, space in seed_round.items()} | first
        caps = {i: n for i, n in caps.items() if budget.allowance(i) > 0}
        if not caps:
            continue
        budget.caps = {i: budget.counts[i] + min(n, budget.allowance(i)) for i, n in caps.items()}

        def seed_space(i: int, seed_round: dict[int, ScheduleSpace] = seed_round) -> SpaceGenerator:
            if i in seed_round:
                return seed_round[i].generator(target)
            return union_for(i)

        search_pass([i for i in active if i in caps], seed_space)
        budget.caps = None
    rest = [i for i in active if task_spaces.of(i) and budget.allowance(i) > 0]
    if rest:
        # Only the union pass can tell that a task has nothing new left in any of its spaces.
        search_pass(rest, union_for, union=True)
    if not result.reason:
        result.reason = (
            f"every task converged (< {MIN_GAIN:.0%} gain in {PATIENCE_BATCHES} batches), "
            "ran out of new schedules or used its trials"
        )
    if result.trials_measured:
        # The persisted model learns this search's trials (and any other job's since).
        saved = store.refresh()
        emit(on_event, CostModelSaved(**saved.as_event()))
    return result


def planned_event(plan: SearchPlan, active: list[int]) -> SearchPlanned:
    """The ``search_planned`` event: totals, and per task to tune (in search order) its
    allocated trials and why."""
    total = sum(o.seconds for o in plan.outlooks if o is not None) or 1.0
    allocation = []
    for i in active:
        task, outlook = plan.tasks[i], plan.outlooks[i]
        allocation.append(
            {
                "task_index": i,
                "task": task.name,
                "kind": task.kind,
                "op": task.op or "fused",
                "shape": task.shape_text,
                "occurrences": task.occurrences,
                "trials": plan.remaining(i),
                "budget": plan.budgets[i],
                "recorded": plan.done_before[i],
                "share": None if outlook is None else round(outlook.seconds / total, 4),
                **({} if outlook is None else outlook.as_dict()),
            }
        )
    return SearchPlanned(
        tasks=len(plan.tasks),
        to_tune=len(active),
        trials=sum(plan.remaining(i) for i in active),
        already_recorded=sum(plan.done_before),
        rule=(
            "trials ∝ share of time × distance from the reference GFLOP/s "
            f"(within {ALLOCATION_FLOOR:g}–{ALLOCATION_CAP:g}× trials per task); "
            f"stop after {PATIENCE_BATCHES} batches without {MIN_GAIN:.0%} gain"
        ),
        allocation=allocation,
    )


def _search_pass(
    plan: SearchPlan,
    active: list[int],
    *,
    budget: TrialBudget,
    space_for: Callable[[int], SpaceGenerator],
    database: SQLDatabase,
    target: Target,
    cost_model: XGBModel,
    threads: int,
    seed: int,
    job_id: int | None,
    spaces: Sequence[ScheduleSpace],
    task_spaces: TaskSpaces,
    on_event: EventSink | None,
    fleet: Fleet | None,
    union: bool = False,
) -> None:
    """One ``ms.tune_tasks`` run over ``active`` tasks, within ``budget``; ``cost_model`` is
    warm and keeps learning across passes. In the ``union`` pass, a task that runs out of new
    schedules is marked so on its workload."""
    remaining = [budget.allowance(i) for i in active]
    # A task may go past its share with trials other tasks left when they stopped early.
    most = max(remaining)
    if budget.caps is None and plan.caps:
        most = max(most, *(plan.caps[i] - budget.counts[i] for i in active))
    seeds = ms.utils.fork_seed(seed, n=len(active))
    with tempfile.TemporaryDirectory(prefix="convtune-search-") as work_dir:
        contexts = [
            ms.TuneContext(
                mod=plan.tasks[i].mod,
                target=target,
                space_generator=space_for(i),
                search_strategy=BudgetedSearch(evolutionary_search(allowed), budget, i, union),
                task_name=plan.tasks[i].name,
                rand_state=rand_state,
                num_threads=threads,
            ).clone()
            for i, allowed, rand_state in zip(active, remaining, seeds, strict=True)
        ]
        runner = make_runner(fleet, EVALUATOR)
        recorder = RecordTrials(
            database, budget, active, spaces=spaces, task_spaces=task_spaces, job_id=job_id,
            on_event=on_event, runner=runner,
        )  # fmt: skip
        # Candidates compile on every core the process may use (measurement, in the runner,
        # stays one at a time).
        builder = CandidateBuilder(max_workers=max(threads, len(os.sched_getaffinity(0))))
        try:
            ms.tune_tasks(
                tasks=contexts,
                task_weights=[float(plan.tasks[i].occurrences) for i in active],
                work_dir=work_dir,
                max_trials_global=sum(remaining),
                max_trials_per_task=most,
                # BudgetedSearch cuts each task's batch to its allowance, so a task with few
                # trials left does not shrink everybody's batch: with the smallest allowance as
                # the batch size (often 2: a pooling task), ResNet-50 with its Winograd tasks
                # spent 10 of 20 minutes on the seed pass alone, a search per 2 trials.
                num_trials_per_iter=max(2, min(MAX_BATCH, max(remaining))),
                builder=builder,
                runner=runner,
                database=database,
                cost_model=cost_model,
                measure_callbacks=[
                    recorder,
                    ms.measure_callback.RemoveBuildArtifact(),
                    TrainCadence(cost_model),
                    ms.measure_callback.UpdateCostModel(),
                ],
                task_scheduler=ExclusiveGradient(seed),
            )
        finally:
            builder.shutdown()
            shutdown_runner(runner)
