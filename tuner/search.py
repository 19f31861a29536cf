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
from dataclasses import dataclass, field
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.cost_model import XGBModel
from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, RunnerResult
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
from tvm.target import Target

from convtune.db.ms_database import SQLDatabase
from convtune.schedules.space import SpaceConfig, generic_space

from .builder import CandidateBuilder
from .extract import ModelTask

EventSink = Callable[[str, dict[str, Any]], None]

# Elementwise and pooling tasks have small spaces that converge in a few trials.
OTHER_TASK_TRIALS = 8
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
    per_task: dict[int, int] = field(default_factory=dict)


def task_budget(task: ModelTask, trials_per_task: int) -> int:
    return trials_per_task if task.kind != "other" else min(trials_per_task, OTHER_TASK_TRIALS)


def plan_search(
    tasks: Sequence[ModelTask], database: SQLDatabase, trials_per_task: int, *, retune: bool
) -> SearchPlan:
    workload_ids = [database.workload_id(task.mod, task.name) for task in tasks]
    budgets = [task_budget(task, trials_per_task) for task in tasks]
    # A retune asks for `budget` new trials on top of what is recorded.
    done = [0] * len(tasks) if retune else [database.count_trials(wid) for wid in workload_ids]
    return SearchPlan(list(tasks), workload_ids, budgets, done)


@derived_object
class RecordTrials(PyMeasureCallback):
    """Writes every measured candidate to the database and enforces the budgets.

    Runs first among the measure callbacks, so a trial is durable before anything else uses it.
    """

    def __init__(
        self,
        database: SQLDatabase,
        plan: SearchPlan,
        active: list[int],
        *,
        space: str,
        job_id: int | None,
        deadline: float | None,
        should_stop: Callable[[], bool] | None,
        on_event: EventSink | None,
        result: SearchResult,
    ) -> None:
        super().__init__()
        self.database = database
        self.plan = plan
        self.active = active  # scheduler task id -> index into plan.tasks
        self.space = space
        self.job_id = job_id
        self.deadline = deadline
        self.should_stop = should_stop
        self.on_event = on_event
        self.result = result
        self.counts = {i: plan.done_before[i] for i in active}
        self.best_gflops: dict[int, float | None] = {}
        self.terminated: set[int] = set()

    def apply(
        self,
        task_scheduler: ms.TaskScheduler,
        task_id: int,
        measure_candidates: list[MeasureCandidate],
        builder_results: list[ms.builder.BuilderResult],
        runner_results: list[RunnerResult],
    ) -> None:
        index = self.active[task_id]
        task = self.plan.tasks[index]
        wid = self.plan.workload_ids[index]
        for candidate, built, ran in zip(
            measure_candidates, builder_results, runner_results, strict=True
        ):
            error = built.error_msg or ran.error_msg
            run_secs = None if error or ran.run_secs is None else [float(s) for s in ran.run_secs]
            self.database.record_trial(
                wid,
                trace_json=candidate.sch.trace.as_json(),
                run_secs=run_secs,
                args_info_json=[arg.as_json() for arg in candidate.args_info],
                error=_first_lines(error) if error else None,
                trial_index=self.counts[index],
                space=self.space,
                job_id=self.job_id,
                flops=task.flops,
            )
            self.counts[index] += 1
            self.result.trials_measured += 1
        self.result.per_task[index] = self.counts[index]
        best = self.database.best_record(wid)
        if self.on_event is not None:
            self.on_event(
                "trial_batch",
                {
                    "task_index": index,
                    "task": task.name,
                    "op": task.op or "fused",
                    "shape": task.shape_text,
                    "trials": self.counts[index],
                    "budget": self.plan.budgets[index],
                    "best_gflops": best.gflops if best is not None else None,
                    "best_ms": best.mean_sec * 1e3 if best is not None and best.mean_sec else None,
                    "errors": sum(
                        1
                        for b, r in zip(builder_results, runner_results, strict=True)
                        if b.error_msg or r.error_msg
                    ),
                },
            )
        if self.counts[index] >= self.plan.budgets[index]:
            self._terminate(task_scheduler, task_id)
        reason = self._stop_reason()
        if reason:
            self.result.stopped_early = True
            self.result.reason = reason
            for other in range(len(self.active)):
                self._terminate(task_scheduler, other)

    def _stop_reason(self) -> str:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return "time budget reached"
        if self.should_stop is not None and self.should_stop():
            return "stop requested"
        return ""

    def _terminate(self, task_scheduler: ms.TaskScheduler, task_id: int) -> None:
        if task_id not in self.terminated:
            self.terminated.add(task_id)
            task_scheduler.terminate_task(task_id)


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
    space: SpaceConfig | None = None,
    on_event: EventSink | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> SearchResult:
    """Tune every task that still has budget; returns what was measured and why it stopped."""
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
    config = space or SpaceConfig()
    # The runner's worker process inherits this: it measures with the artifact's thread count.
    os.environ["TVM_NUM_THREADS"] = str(threads)
    seeds = ms.utils.fork_seed(seed, n=len(active))
    with tempfile.TemporaryDirectory(prefix="convtune-search-") as work_dir:
        contexts = [
            ms.TuneContext(
                mod=plan.tasks[i].mod,
                target=target,
                space_generator=generic_space(target, config),
                search_strategy="evolutionary",
                task_name=plan.tasks[i].name,
                rand_state=rand_state,
                num_threads=threads,
            ).clone()
            for i, rand_state in zip(active, seeds, strict=True)
        ]
        cost_model = XGBModel(
            config=XGBConfig(seed=seed, nthread=threads),
            num_warmup_samples=min(16, trials_per_task),
            num_tuning_cores=threads,
            verbose_eval=0,
        )
        warm = warm_start_cost_model(cost_model, contexts, plan, active, database)
        if on_event is not None and warm:
            on_event("cost_model_warm_start", {"records": warm})
        deadline = time.monotonic() + budget_minutes * 60.0 if budget_minutes is not None else None
        recorder = RecordTrials(
            database,
            plan,
            active,
            space=config.name,
            job_id=job_id,
            deadline=deadline,
            should_stop=should_stop,
            on_event=on_event,
            result=result,
        )
        remaining = [plan.remaining(i) for i in active]
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
                runner=ms.runner.LocalRunner(timeout_sec=30.0, evaluator_config=EVALUATOR),
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
    return result
