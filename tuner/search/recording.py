"""Every measured trial into our database, failed ones too (with their error), with its index,
space and job; the space that fails every candidate of a task is dropped there."""

from __future__ import annotations

from collections.abc import Sequence

from tvm.ir import IRModule
from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
from tvm.s_tir.meta_schedule.runner import RunnerResult
from tvm.s_tir.meta_schedule.search_strategy import (
    MeasureCandidate,
)

from convtune.db.ms_database import SQLDatabase
from convtune.schedules.spaces.base import ScheduleSpace
from convtune.schedules.spaces.registry import space_of
from convtune.schedules.untuned import DEFAULT_SCHEDULE, default_schedule
from convtune.tuner.events import EventSink, SpaceDropped, TaskStopped, TrialBatch, emit
from convtune.tuner.measure.runner import measured_by
from convtune.tuner.search.budget import MIN_GAIN, PATIENCE_BATCHES, TrialBudget
from convtune.tuner.search.space_check import (
    FAILED_CANDIDATES_TO_DROP,
    SpaceHealth,
    TaskSpaces,
)


def floor_candidates(mod: IRModule, lanes: int) -> list[MeasureCandidate]:
    """The schedules of the task no search produced, as candidates: its function as TVM
    compiles it without a schedule (an empty trace, which replays to the function itself) and
    the default rule's schedule (``schedules/untuned.py``), where the rule applies."""
    args_info = ArgInfo.from_prim_func(mod["main"])
    candidates = [MeasureCandidate(Schedule(mod), args_info)]
    rule = default_schedule(mod["main"], lanes)
    if rule is not None:
        candidates.append(MeasureCandidate(rule, args_info))
    return candidates


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
        task_spaces: TaskSpaces | None = None,
        job_id: int | None,
        on_event: EventSink | None,
        runner: ms.runner.Runner,
    ) -> None:
        super().__init__()
        self.task_spaces = task_spaces
        self.health = SpaceHealth()
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
            space = trial_space(candidate.sch, str(trace_json), self.spaces)
            self.database.records.record_trial(
                wid,
                trace_json=trace_json,
                run_secs=run_secs,
                args_info_json=[arg.as_json() for arg in candidate.args_info],
                error=_first_lines(error) if error else None,
                trial_index=self.budget.counts[index],
                space=space,
                job_id=self.job_id,
                flops=task.flops,
                device=None if built.error_msg else measured.device,
            )
            self.budget.count_trial(index)
            if self.health.count(index, space, error) and self.task_spaces is not None:
                reason = f"none of its {FAILED_CANDIDATES_TO_DROP} candidates built and ran: "
                last = (error or "").strip().splitlines() or [""]
                dropped = self.task_spaces.drop(index, task.name, space, reason + last[-1][:300])
                if dropped is not None:
                    emit(self.on_event, SpaceDropped(**dropped.as_dict()))
        best = self.database.records.best_record(wid)
        # A batch the fleet could not measure says nothing about the task's progress.
        stopped = not self.budget.result.paused and self.budget.batch_measured(
            index, best.mean_sec if best is not None else None
        )
        if self.on_event is None:
            return
        if stopped:
            self.on_event(
                TaskStopped(
                    task_index=index,
                    task=task.name,
                    trials=self.budget.counts[index],
                    budget=plan.budgets[index],
                    best_gflops=best.gflops if best is not None else None,
                    reason=f"best improved < {MIN_GAIN:.0%} in {PATIENCE_BATCHES} batches",
                    spare_trials=self.budget.spare,
                )
            )
        self.on_event(
            TrialBatch(
                task_index=index,
                task=task.name,
                op=task.op or "fused",
                shape=task.shape_text,
                trials=self.budget.counts[index],
                budget=plan.budgets[index],
                best_gflops=best.gflops if best is not None else None,
                best_ms=best.mean_sec * 1e3 if best is not None and best.mean_sec else None,
                errors=errors,
            )
        )


def trial_space(sch: Schedule, trace_text: str, spaces: Sequence[ScheduleSpace]) -> str:
    """The space a measured candidate came from; :data:`DEFAULT_SCHEDULE` for the floor the
    search measures on every non-conv task (:func:`floor_candidates`): the unscheduled function
    (an empty trace) and the default rule's schedule (its trace names that space)."""
    if not sch.trace.insts:
        return DEFAULT_SCHEDULE
    return space_of(trace_text, spaces)


def _first_lines(text: str, limit: int = 2000) -> str:
    return text.strip()[:limit]
