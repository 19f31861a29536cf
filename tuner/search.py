"""Search: MetaSchedule's task scheduler over every task of a model, recording into our database.

What convtune adds to a plain ``ms.tune_tasks`` call:
- per-task trial budgets that count the trials already in the database, so a killed run resumes
  where it stopped and a workload tuned before (by any model) is not searched again;
- a wall-clock budget and a stop request, both checked after every measured batch;
- every trial (failed ones too, with their error) recorded with its index, space and job;
- the XGBoost cost model trained on the recorded trials before the first new measurement;
- measurements taken with the thread count the artifact will run with.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tvm.ir import IRModule
from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.cost_model import CostModel, XGBModel
from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig
from tvm.s_tir.meta_schedule.database import Database
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, RunnerResult
from tvm.s_tir.meta_schedule.search_strategy import (
    EvolutionarySearch,
    MeasureCandidate,
    PySearchStrategy,
    SearchStrategy,
)
from tvm.s_tir.meta_schedule.space_generator import SpaceGenerator
from tvm.target import Target

from convtune.db.ms_database import SQLDatabase, trace_key
from convtune.schedules.base import ScheduleSpace
from convtune.schedules.registry import SPACES, space_of, union_space

from .builder import CandidateBuilder
from .extract import ModelTask
from .fleet import Fleet
from .options import task_budget
from .runner import make_runner, measured_by, shutdown_runner

EventSink = Callable[[str, dict[str, Any]], None]

# A trial's timing: enough repeats to be stable on a shared machine, without dominating the
# search (candidate compilation takes ~1.5 s; one measurement should take well under that).
EVALUATOR = EvaluatorConfig(number=3, repeat=3, min_repeat_ms=40, enable_cpu_cache_flush=False)


@dataclass
class SearchPlan:
    """Which tasks still need trials and how many, given what the database already holds."""

    tasks: list[ModelTask]
    workload_ids: list[int]
    budgets: list[int]
    done_before: list[int]

    def remaining(self, i: int) -> int:
        return max(0, self.budgets[i] - self.done_before[i])


@dataclass
class SearchResult:
    trials_measured: int = 0
    stopped_early: bool = False
    reason: str = ""
    paused: str = ""  # why the fleet could not measure (tracker gone): the job pauses


def evolutionary_search(trials_per_task: int) -> EvolutionarySearch:
    """MetaSchedule's evolutionary search, its population scaled to the trial budget.

    The default population (512 schedules sampled, mutated and ranked by the cost model for every
    batch) is sized for 64-trial batches; for a budget of a few trials it costs more time than the
    measurements themselves.
    """
    return EvolutionarySearch(population_size=min(512, max(64, 8 * trials_per_task)))


def plan_search(
    tasks: Sequence[ModelTask], database: SQLDatabase, trials_per_task: int, *, retune: bool
) -> SearchPlan:
    workload_ids = [database.workload_id(task.mod, task.name) for task in tasks]
    budgets = [task_budget(task.kind, trials_per_task) for task in tasks]
    # A retune asks for `budget` new trials on top of what is recorded.
    done = [0] * len(tasks) if retune else [database.count_trials(wid) for wid in workload_ids]
    return SearchPlan(list(tasks), workload_ids, budgets, done)


class TrialBudget:
    """How many more trials each task may take: its budget, the clock and stop requests.

    Enforced where candidates are generated (``BudgetedSearch``): a task that may take no more
    trials generates none, and MetaSchedule's scheduler then retires it by itself.
    """

    def __init__(
        self,
        plan: SearchPlan,
        database: SQLDatabase,
        deadline: float | None,
        should_stop: Callable[[], bool] | None,
        result: SearchResult,
    ) -> None:
        self.plan = plan
        self.database = database
        self.deadline = deadline
        self.should_stop = should_stop
        self.result = result
        self.counts = list(plan.done_before)
        # trace_key of every schedule measured or in flight, per task index (loaded on first use).
        self.seen: dict[int, set[str]] = {}
        # Optional lower limits for one search pass: task index -> total trials allowed.
        self.caps: dict[int, int] | None = None

    def allowance(self, index: int) -> int:
        reason = self.stop_reason()
        if reason:
            self.result.stopped_early = True
            self.result.reason = reason
            return 0
        limit = self.plan.budgets[index]
        if self.caps is not None:
            limit = min(limit, self.caps.get(index, 0))
        return max(0, limit - self.counts[index])

    def measured(self, index: int) -> set[str]:
        if index not in self.seen:
            self.seen[index] = self.database.trace_keys(self.plan.workload_ids[index])
        return self.seen[index]

    def stop_reason(self) -> str:
        if self.result.paused:
            return f"paused: {self.result.paused}"
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return "time budget reached"
        if self.should_stop is not None and self.should_stop():
            return "stop requested"
        return ""


@derived_object
class BudgetedSearch(PySearchStrategy):
    """Wraps a search strategy so that a task stops when its ``TrialBudget`` allowance is spent.

    An empty batch also ends the task: the space is exhausted (tiny elementwise spaces have a
    handful of distinct schedules), and asking again would only repeat the search.
    """

    def __init__(self, inner: SearchStrategy, budget: TrialBudget, index: int) -> None:
        super().__init__()
        self.inner = inner
        self.budget = budget
        self.index = index

    def _initialize_with_tune_context(self, context: ms.TuneContext) -> None:
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(
        self,
        max_trials: int,
        num_trials_per_iter: int,
        design_spaces: list[Schedule],
        database: Database | None = None,
        cost_model: CostModel | None = None,
    ) -> None:
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self) -> list[MeasureCandidate] | None:
        allowed = self.budget.allowance(self.index)
        if allowed <= 0:
            return None
        candidates = self.inner.generate_measure_candidates()
        if not candidates:
            return None
        # MetaSchedule's search only avoids re-measuring within one run, and a small space
        # (ours has a handful of schedules per layer) yields the same candidates again and again:
        # a schedule measured before, by this run or any earlier one, is never measured again.
        seen = self.budget.measured(self.index)
        fresh: list[MeasureCandidate] = []
        for candidate in candidates:
            key = trace_key(candidate.sch.trace.as_json())
            if key not in seen and len(fresh) < allowed:
                seen.add(key)
                fresh.append(candidate)
        return fresh or None

    def notify_runner_results(
        self, measure_candidates: list[MeasureCandidate], results: list[RunnerResult]
    ) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self) -> SearchStrategy:
        return BudgetedSearch(self.inner.clone(), self.budget, self.index)


@derived_object
class RecordTrials(PyMeasureCallback):
    """Writes every measured candidate to the database as soon as its batch is measured.

    Runs first among the measure callbacks, so a trial is durable before anything else uses it.
    """

    def __init__(
        self,
        database: SQLDatabase,
        budget: TrialBudget,
        active: list[int],
        *,
        spaces: Sequence[ScheduleSpace],
        job_id: int | None,
        on_event: EventSink | None,
        runner: ms.runner.Runner,
    ) -> None:
        super().__init__()
        self.runner = runner
        self.database = database
        self.budget = budget
        self.active = active  # scheduler task id -> index into plan.tasks
        self.spaces = spaces
        self.job_id = job_id
        self.on_event = on_event

    def apply(
        self,
        task_scheduler: ms.TaskScheduler,
        task_id: int,
        measure_candidates: list[MeasureCandidate],
        builder_results: list[ms.builder.BuilderResult],
        runner_results: list[RunnerResult],
    ) -> None:
        index = self.active[task_id]
        plan = self.budget.plan
        task = plan.tasks[index]
        wid = plan.workload_ids[index]
        errors = 0
        for candidate, built, ran in zip(
            measure_candidates, builder_results, runner_results, strict=True
        ):
            measured = measured_by(self.runner, built.artifact_path)
            if measured.unmeasured:  # not a trial: the fleet was unreachable; the job pauses
                self.budget.result.paused = measured.unmeasured
                continue
            error = built.error_msg or ran.error_msg
            errors += bool(error)
            run_secs = None if error or ran.run_secs is None else [float(s) for s in ran.run_secs]
            trace_json = candidate.sch.trace.as_json()
            self.database.record_trial(
                wid,
                trace_json=trace_json,
                run_secs=run_secs,
                args_info_json=[arg.as_json() for arg in candidate.args_info],
                error=_first_lines(error) if error else None,
                trial_index=self.budget.counts[index],
                space=space_of(str(trace_json), self.spaces),
                job_id=self.job_id,
                flops=task.flops,
                device=None if built.error_msg else measured.device,
            )
            self.budget.counts[index] += 1
            self.budget.result.trials_measured += 1
        if self.on_event is None:
            return
        best = self.database.best_record(wid)
        self.on_event(
            "trial_batch",
            {
                "task_index": index,
                "task": task.name,
                "op": task.op or "fused",
                "shape": task.shape_text,
                "trials": self.budget.counts[index],
                "budget": plan.budgets[index],
                "best_gflops": best.gflops if best is not None else None,
                "best_ms": best.mean_sec * 1e3 if best is not None and best.mean_sec else None,
                "errors": errors,
            },
        )


def _first_lines(text: str, limit: int = 2000) -> str:
    return text.strip()[:limit]


def warm_start_cost_model(
    cost_model: XGBModel,
    contexts: list[ms.TuneContext],
    plan: SearchPlan,
    active: list[int],
    database: SQLDatabase,
) -> int:
    """Train the cost model on the trials already recorded for these tasks; returns how many."""
    used = 0
    for context, index in zip(contexts, active, strict=True):
        workload = database.commit_workload(plan.tasks[index].mod)
        records = database.get_top_k(workload, 256)
        if not records:
            continue
        candidates = [record.as_measure_candidate() for record in records]
        results = [RunnerResult(run_secs=record.run_secs, error_msg=None) for record in records]
        cost_model.update(context, candidates, results)
        used += len(records)
    return used


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

    First a seed pass per space with ``seed_trials`` (that space alone, on the tasks it applies
    to that never had a trial of it), then one pass over the union of each task's applicable
    ``spaces``, started from the best records so far.
    """
    result = SearchResult()
    plan = plan_search(tasks, database, trials_per_task, retune=retune)
    # Largest share of FLOPs first: if the time budget runs out, the big layers got their trials.
    active = sorted(
        (i for i in range(len(plan.tasks)) if plan.remaining(i) > 0),
        key=lambda i: -plan.tasks[i].flops * plan.tasks[i].occurrences,
    )
    if on_event is not None:
        on_event(
            "search_planned",
            {
                "tasks": len(plan.tasks),
                "to_tune": len(active),
                "trials": sum(plan.remaining(i) for i in active),
                "already_recorded": sum(plan.done_before),
            },
        )
    if not active:
        result.reason = "every task already has its trials"
        return result
    # The runner's worker process inherits this: it measures with the artifact's thread count.
    os.environ["TVM_NUM_THREADS"] = str(threads)
    deadline = time.monotonic() + budget_minutes * 60.0 if budget_minutes is not None else None
    budget = TrialBudget(plan, database, deadline, should_stop, result)

    def search_pass(tasks: list[int], space_for: Callable[[IRModule], SpaceGenerator]) -> None:
        _search_pass(
            plan, tasks, budget, space_for, database, target, threads=threads, seed=seed,
            job_id=job_id, spaces=spaces, on_event=on_event, fleet=fleet,
        )  # fmt: skip

    for space in spaces:
        if space.seed_trials <= 0:
            continue
        # A task resumed or tuned before already had its seed pass in this space.
        seeded = [
            i
            for i in active
            if space.applies_to(plan.tasks[i].mod)
            and database.count_trials(plan.workload_ids[i], space.name) == 0
            and budget.allowance(i) > 0
        ]
        if not seeded:
            continue
        budget.caps = {
            i: budget.counts[i] + min(space.seed_trials, budget.allowance(i)) for i in seeded
        }
        search_pass(seeded, lambda mod, space=space: space.generator(target))  # type: ignore[misc]
        budget.caps = None
    rest = [i for i in active if budget.allowance(i) > 0]
    if rest:
        search_pass(rest, lambda mod: union_space(mod, target, spaces))
    return result


def _search_pass(
    plan: SearchPlan,
    active: list[int],
    budget: TrialBudget,
    space_for: Callable[[IRModule], SpaceGenerator],
    database: SQLDatabase,
    target: Target,
    *,
    threads: int,
    seed: int,
    job_id: int | None,
    spaces: Sequence[ScheduleSpace],
    on_event: EventSink | None,
    fleet: Fleet | None,
) -> None:
    """One ``ms.tune_tasks`` run over ``active`` tasks, within ``budget``."""
    remaining = [budget.allowance(i) for i in active]
    seeds = ms.utils.fork_seed(seed, n=len(active))
    with tempfile.TemporaryDirectory(prefix="convtune-search-") as work_dir:
        contexts = [
            ms.TuneContext(
                mod=plan.tasks[i].mod,
                target=target,
                space_generator=space_for(plan.tasks[i].mod),
                search_strategy=BudgetedSearch(evolutionary_search(max(remaining)), budget, i),
                task_name=plan.tasks[i].name,
                rand_state=rand_state,
                num_threads=threads,
            ).clone()
            for i, rand_state in zip(active, seeds, strict=True)
        ]
        cost_model = XGBModel(
            config=XGBConfig(seed=seed, nthread=threads),
            num_warmup_samples=min(16, max(remaining)),
            num_tuning_cores=threads,
            verbose_eval=0,
        )
        warm = warm_start_cost_model(cost_model, contexts, plan, active, database)
        if on_event is not None and warm:
            on_event("cost_model_warm_start", {"records": warm})
        runner = make_runner(fleet, EVALUATOR)
        recorder = RecordTrials(
            database, budget, active, spaces=spaces, job_id=job_id, on_event=on_event, runner=runner
        )
        builder = CandidateBuilder(max_workers=threads)
        try:
            ms.tune_tasks(
                tasks=contexts,
                task_weights=[float(plan.tasks[i].occurrences) for i in active],
                work_dir=work_dir,
                max_trials_global=sum(remaining),
                max_trials_per_task=max(remaining),
                num_trials_per_iter=max(2, min(32, min(remaining))),
                builder=builder,
                runner=runner,
                database=database,
                cost_model=cost_model,
                measure_callbacks=[
                    recorder,
                    ms.measure_callback.RemoveBuildArtifact(),
                    ms.measure_callback.UpdateCostModel(),
                ],
                task_scheduler="gradient",
            )
        finally:
            builder.shutdown()
            shutdown_runner(runner)
