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
from dataclasses import dataclass, field
from functools import partial
from importlib.metadata import version
from typing import Any

from tvm.ir import IRModule
from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.cost_model import CostModel, XGBModel
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

from convtune.db.models import CURRENT_TIMING
from convtune.db.ms_database import SQLDatabase, trace_key
from convtune.schedules.base import DEFAULT_SPACE, ScheduleSpace
from convtune.schedules.registry import SPACES, space_of, union_space

from .builder import CandidateBuilder
from .cost_model import CostModelStore, TrainCadence
from .errors import ConvtuneError, error_line
from .extract import ModelTask
from .fleet import Fleet
from .options import task_budget
from .results import peak_for_threads, stored_peak
from .runner import make_runner, measured_by, shutdown_runner
from .space_check import (
    FAILED_CANDIDATES_TO_DROP,
    DroppedSpace,
    SpaceHealth,
    TaskSpaces,
    check_task_spaces,
)
from .task_scheduler import ExclusiveGradient

EventSink = Callable[[str, dict[str, Any]], None]

#: The space of a task's unscheduled function, measured as a floor (TrialBudget.wants_default).
DEFAULT_SCHEDULE = "default"
#: Task kinds whose unscheduled function is never measured: naive loops take seconds there.
ANCHOR_KINDS = ("conv", "gemm", "matmul")

# A trial's timing (db.models.CURRENT_TIMING): one run per repeat, every argument but the input
# flushed from the caches before it, as in a model, where each layer's weights come from memory.
# Timed warm (back to back, weights in L3), the Winograd kernels looked 20-40% faster than they
# run in ResNet-50, and F(4x4) beat F(2x2) at 256x14x14 where it loses in the model; timed cold
# they match their in-model time within 10% (Zen 4, 2026-12-01: 0.585 cold, 0.653 in the model,
# 0.409 warm ms). The flush is not timed; ten repeats stay well under a candidate's compile time.
EVALUATOR = EvaluatorConfig(number=1, repeat=10, min_repeat_ms=0, enable_cpu_cache_flush=True)
# A task stops when its best improved by less than MIN_GAIN over this many measured batches
# (and it had at least ALLOCATION_FLOOR trials).
PATIENCE_BATCHES = 3
MIN_GAIN = 0.01
# Allocation bounds per conv/gemm/matmul task, as fractions of --trials-per-task.
ALLOCATION_FLOOR = 0.25
ALLOCATION_CAP = 2.0
# An untuned task is assumed to reach half the reference rate with its first trials: its expected
# gain is then the time it would take at the reference (the share of FLOPs, for a cold search).
UNTUNED_FRACTION = 0.5
# The reference when neither a peak nor a record of the kind is known: it only turns FLOPs into
# seconds (the allocation is then by FLOP share, which needs no rate).
NOMINAL_GFLOPS = 100.0


@dataclass
class TaskOutlook:
    """Why a task gets its trials: its time now, and the rate a similar workload reached."""

    seconds: float  # estimated time of the task in one inference (best × occurrences)
    best_gflops: float | None
    reference_gflops: float | None  # best known for its kind of workload here, or peak
    gain: float  # expected seconds saved: seconds − time at the reference rate

    def as_dict(self) -> dict[str, Any]:
        def rounded(v: float | None) -> float | None:
            return None if v is None else round(v, 1)

        return {
            "ms": round(self.seconds * 1e3, 4),
            "best_gflops": rounded(self.best_gflops),
            "reference_gflops": rounded(self.reference_gflops),
            "gain_ms": round(self.gain * 1e3, 4),
        }


@dataclass
class SearchPlan:
    """Which tasks still need trials and how many, given what the database already holds."""

    tasks: list[ModelTask]
    workload_ids: list[int]
    budgets: list[int]
    done_before: list[int]
    outlooks: list[TaskOutlook | None] = field(default_factory=list)
    caps: list[int] = field(default_factory=list)  # most trials a task may take from spares

    def remaining(self, i: int) -> int:
        return max(0, self.budgets[i] - self.done_before[i])


@dataclass
class SearchResult:
    trials_measured: int = 0
    stopped_early: bool = False
    reason: str = ""
    paused: str = ""  # why the fleet could not measure (tracker gone): the job pauses
    #: Spaces left out of a task's search (space_check.py): each a one-line event too.
    dropped: list[DroppedSpace] = field(default_factory=list)


def evolutionary_search(trials_per_task: int) -> EvolutionarySearch:
    """MetaSchedule's evolutionary search, its population scaled to the trial budget.

    The default population (512 schedules sampled, mutated and ranked by the cost model for every
    batch) is sized for 64-trial batches; for a budget of a few trials it costs more time than the
    measurements themselves. Sized per task: on Zen 4 the union pass's first round over
    EfficientNet-B0's 75 tasks took 14 of 30 minutes with every task at 512 (the largest task's
    size), though 45 of the 75 were allotted 8 or 16 trials (a population of 64 or 128 here).
    """
    return EvolutionarySearch(population_size=min(512, max(64, 8 * trials_per_task)))


def reference_rates(
    database: SQLDatabase, peak_gflops: float | None, percentile: float = 90.0
) -> dict[str | None, float]:
    """Kind of task -> the GFLOP/s a good schedule of that kind reaches on this target.

    The ``percentile`` of the best rates of the target's workloads of that kind (not the maximum:
    one noisy trial should not set the bar), capped by the peak; kinds never measured map to
    the peak (key None).
    """
    by_kind: dict[str | None, list[float]] = {}
    for kind, gflops in database.best_gflops_by_workload().values():
        by_kind.setdefault(kind, []).append(gflops)
    rates: dict[str | None, float] = {}
    for kind, values in by_kind.items():
        if kind is None:
            continue
        values.sort()
        rank = min(len(values) - 1, round(percentile / 100 * (len(values) - 1)))
        rates[kind] = min(values[rank], peak_gflops) if peak_gflops else values[rank]
    if peak_gflops:
        rates[None] = peak_gflops
    return rates


def task_outlook(
    task: ModelTask, best_sec: float | None, reference_gflops: float | None
) -> TaskOutlook:
    """The expected gain of tuning ``task`` further (see ``TaskOutlook``)."""
    occurrences = task.occurrences
    best_gflops = task.flops / best_sec / 1e9 if best_sec and task.flops else None
    at_reference = occurrences * task.flops / ((reference_gflops or NOMINAL_GFLOPS) * 1e9)
    # Untuned: no time known yet (a naive loop nest is no guide to what tuning reaches).
    seconds = at_reference / UNTUNED_FRACTION if best_sec is None else occurrences * best_sec
    return TaskOutlook(seconds, best_gflops, reference_gflops, max(0.0, seconds - at_reference))


def allocate(
    gains: Sequence[float], total: int, low: Sequence[int], high: Sequence[int]
) -> list[int]:
    """Split ``total`` trials over tasks in proportion to ``gains``, task i within
    [``low[i]``, ``high[i]``].

    Water-filling: tasks whose share falls outside their bounds are pinned to them and the rest
    re-split, so the sum is ``total`` whenever ``sum(low) <= total <= sum(high)`` (else it is
    the nearer of the two).
    """
    n = len(gains)
    if n == 0:
        return []
    total = max(sum(low), min(total, sum(high)))
    pinned: dict[int, int] = {}
    shares: dict[int, float] = {}
    while len(pinned) < n:
        free = [i for i in range(n) if i not in pinned]
        left = total - sum(pinned.values())
        weight = sum(max(gains[i], 0.0) for i in free)
        shares = {
            i: left * max(gains[i], 0.0) / weight if weight > 0 else left / len(free) for i in free
        }
        over = [i for i in free if shares[i] > high[i]]
        under = [i for i in free if shares[i] < low[i]]
        if not over and not under:
            break
        # Pin the side that is out of bounds by more first; the other may then fit.
        if sum(shares[i] - high[i] for i in over) >= sum(low[i] - shares[i] for i in under):
            pinned.update({i: high[i] for i in over})
        else:
            pinned.update({i: low[i] for i in under})
    out = [pinned.get(i, 0) for i in range(n)]
    free = [i for i in range(n) if i not in pinned]
    for i in free:
        out[i] = int(shares[i])
    # Largest remainders, so the integer trials add up to the total.
    rest = total - sum(out)
    for i in sorted(free, key=lambda i: shares[i] - int(shares[i]), reverse=True)[: max(rest, 0)]:
        out[i] += 1
    return out


def plan_search(
    tasks: Sequence[ModelTask],
    database: SQLDatabase,
    trials_per_task: int,
    *,
    retune: bool,
    peak_gflops: float | None = None,
    searched_key: str | None = None,
) -> SearchPlan:
    """Budgets per task: elementwise tasks a fixed few, the others by expected gain.

    The conv/gemm/matmul tasks of the model share a pool of ``trials_per_task`` × their number,
    minus the trials already recorded for them (by this job before it was killed, or by any
    model with the same workloads): a re-run of a tuned model measures nothing, a resumed one
    spends what is left. The pool goes to the tasks in proportion to ``TaskOutlook.gain``; a task
    never measured gets at least ``ALLOCATION_FLOOR`` × ``trials_per_task``, none more than
    ``ALLOCATION_CAP`` × ``trials_per_task`` in all.

    A task whose workload a search over the same spaces left with nothing new to measure, or
    stopped because its best had not improved in ``PATIENCE_BATCHES`` batches (marked with
    ``searched_key``: :func:`exhaustion_key`, ``TrialBudget.mark_searched``), gets no trials,
    unless ``retune``: running the same command twice measures nothing the second time.
    """
    workload_ids = [database.workload_id(task.mod, task.name) for task in tasks]
    budgets = [task_budget(task.kind, trials_per_task) for task in tasks]
    # A retune asks for `budget` new trials on top of what is recorded.
    done = [0] * len(tasks) if retune else [database.count_trials(wid) for wid in workload_ids]
    rates = reference_rates(database, peak_gflops)
    outlooks: list[TaskOutlook | None] = []
    for task, wid in zip(tasks, workload_ids, strict=True):
        best = database.best_record(wid)
        outlooks.append(
            task_outlook(
                task,
                best.mean_sec if best is not None else None,
                rates.get(task.kind, rates.get(None)),
            )
        )
    caps = list(budgets)
    searched = [i for i, task in enumerate(tasks) if task.kind != "other"]
    floor = max(1, round(ALLOCATION_FLOOR * trials_per_task))
    cap = max(trials_per_task, round(ALLOCATION_CAP * trials_per_task))
    recorded = [min(done[i], cap) for i in searched]
    pool = max(0, trials_per_task * len(searched) - sum(recorded))
    new_trials = allocate(
        [outlooks[i].gain for i in searched],  # type: ignore[union-attr]
        pool,
        [floor if d == 0 and pool else 0 for d in recorded],
        [cap - d for d in recorded],
    )
    for i, extra in zip(searched, new_trials, strict=True):
        budgets[i] = done[i] + extra
        caps[i] = max(budgets[i], cap)
    if searched_key is not None and not retune:
        for i, wid in enumerate(workload_ids):
            if database.exhausted_key(wid) == searched_key:
                budgets[i] = min(budgets[i], done[i])
    return SearchPlan(list(tasks), workload_ids, budgets, done, outlooks, caps)


def exhaustion_key(spaces: Sequence[ScheduleSpace]) -> str:
    """What a workload's exhaustion is relative to: the spaces searched and the code that
    generated them (a new space or a new version may have schedules the old ones had not), and
    how trials are timed (a search that converged warm says nothing of the cold times)."""
    names = ",".join(sorted(space.name for space in spaces))
    return f"{version('convtune')}:{CURRENT_TIMING.value}:{names}"


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
        searched_key: str | None = None,
    ) -> None:
        self.plan = plan
        # The spaces' key a task is marked with when they have nothing more to give it.
        self.searched_key = searched_key
        self.database = database
        self.deadline = deadline
        self.should_stop = should_stop
        self.result = result
        self.counts = list(plan.done_before)
        # trace_key of every schedule measured or in flight, per task index (loaded on first use).
        self.seen: dict[int, set[str]] = {}
        # Optional lower limits for one search pass: task index -> total trials allowed.
        self.caps: dict[int, int] | None = None
        # Early stop: best mean time per task, batches since it last improved, stopped tasks,
        # and the trials they left unspent (the spare pool other tasks may draw from).
        self.best: dict[int, float] = {}
        self.stale: dict[int, int] = {}
        self.retired: set[int] = set()
        self.spare = 0
        # Tasks whose unscheduled function was measured or offered (wants_default).
        self.defaulted: set[int] = set()
        # Why the search cannot go on at all (a pass failed even in the generic space).
        self.halted = ""

    def allowance(self, index: int) -> int:
        reason = self.stop_reason()
        if reason:
            self.result.stopped_early = True
            self.result.reason = reason
            return 0
        if index in self.retired:
            return 0
        limit = self.plan.budgets[index]
        if self.caps is not None:
            return max(0, min(limit, self.caps.get(index, 0)) - self.counts[index])
        own = limit - self.counts[index]
        if own > 0:
            return own
        cap = self.plan.caps[index] if self.plan.caps else limit
        return max(0, min(self.spare, cap - self.counts[index]))

    def count_trial(self, index: int) -> None:
        """One more trial of task ``index``; beyond its share, it came from the spare pool."""
        if self.counts[index] >= self.plan.budgets[index] and self.caps is None:
            self.spare = max(0, self.spare - 1)
        self.counts[index] += 1
        self.result.trials_measured += 1

    def batch_measured(self, index: int, best_sec: float | None) -> bool:
        """Track task ``index``'s best after a batch; True if the task stops now (no gain in
        ``PATIENCE_BATCHES`` batches; only outside seed passes)."""
        previous = self.best.get(index)
        if best_sec is not None and (previous is None or best_sec < previous * (1 - MIN_GAIN)):
            self.best[index] = best_sec
            self.stale[index] = 0
            return False
        if self.caps is not None:
            # A seed pass of a second space that does not beat the first says nothing of
            # whether the union search will: patience counts union batches only.
            return False
        self.stale[index] = self.stale.get(index, 0) + 1
        if self.stale[index] < PATIENCE_BATCHES:
            return False
        if index in self.retired:
            return False
        self.retired.add(index)
        self.spare += max(0, self.plan.budgets[index] - self.counts[index])
        self.mark_searched(index)
        return True

    def mark_searched(self, index: int) -> None:
        """Record on task ``index``'s workload that the searched spaces have nothing more to
        give it: no new schedule left, or no gain in ``PATIENCE_BATCHES`` union batches. The
        same command again (a re-upload) measures nothing for it; ``retune`` or another set of
        spaces searches it again (``plan_search``)."""
        if self.searched_key is not None:
            self.database.mark_exhausted(self.plan.workload_ids[index], self.searched_key)

    def wants_default(self, index: int) -> bool:
        """Whether task ``index`` still needs its unscheduled function measured, once: every
        task but the anchors (conv, Gemm, MatMul, whose naive loops take seconds) gets it as its
        floor, so the build never picks a schedule slower than no schedule at all. A 1×1000
        Softmax kept a 149 ms record from a search whose candidates recomputed the reduction
        per element; unscheduled, it takes microseconds (issue 30)."""
        if self.plan.tasks[index].kind in ANCHOR_KINDS or index in self.defaulted:
            return False
        self.defaulted.add(index)
        return self.database.count_trials(self.plan.workload_ids[index], DEFAULT_SCHEDULE) == 0

    def measured(self, index: int) -> set[str]:
        if index not in self.seen:
            self.seen[index] = self.database.trace_keys(self.plan.workload_ids[index])
        return self.seen[index]

    def stop_reason(self) -> str:
        if self.halted:
            return self.halted
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
    handful of distinct schedules), and asking again would only repeat the search. In the union
    pass (``union``) that is recorded on the workload (``TrialBudget.mark_searched``); a seed
    pass searches one space of several, whose exhaustion says nothing of the others.
    """

    def __init__(
        self,
        inner: SearchStrategy,
        budget: TrialBudget,
        index: int,
        union: bool = False,
    ) -> None:
        super().__init__()
        self.inner = inner
        self.budget = budget
        self.index = index
        self.union = union

    def _initialize_with_tune_context(self, context: ms.TuneContext) -> None:
        self.mod = context.mod
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
            self._exhausted()
            return None
        if self.budget.wants_default(self.index):
            candidates = [unscheduled_candidate(self.mod), *candidates]
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
        if not fresh:
            self._exhausted()
        return fresh or None

    def _exhausted(self) -> None:
        if self.union:
            self.budget.mark_searched(self.index)

    def notify_runner_results(
        self, measure_candidates: list[MeasureCandidate], results: list[RunnerResult]
    ) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self) -> SearchStrategy:
        return BudgetedSearch(self.inner.clone(), self.budget, self.index, self.union)


def unscheduled_candidate(mod: IRModule) -> MeasureCandidate:
    """The task's function as TVM compiles it without a schedule, as a candidate: its empty
    trace replays to the function itself, so a build that picks its record runs exactly that."""
    return MeasureCandidate(Schedule(mod), ArgInfo.from_prim_func(mod["main"]))


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
            self.database.record_trial(
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
                    _emit(self.on_event, "space_dropped", dropped.as_dict())
        best = self.database.best_record(wid)
        # A batch the fleet could not measure says nothing about the task's progress.
        stopped = not self.budget.result.paused and self.budget.batch_measured(
            index, best.mean_sec if best is not None else None
        )
        if self.on_event is None:
            return
        if stopped:
            self.on_event(
                "task_stopped",
                {
                    "task_index": index,
                    "task": task.name,
                    "trials": self.budget.counts[index],
                    "budget": plan.budgets[index],
                    "best_gflops": best.gflops if best is not None else None,
                    "reason": f"best improved < {MIN_GAIN:.0%} in {PATIENCE_BATCHES} batches",
                    "spare_trials": self.budget.spare,
                },
            )
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


def _emit(on_event: EventSink | None, kind: str, payload: dict[str, Any]) -> None:
    if on_event is not None:
        on_event(kind, payload)


def trial_space(sch: Schedule, trace_text: str, spaces: Sequence[ScheduleSpace]) -> str:
    """The space a measured candidate came from; :data:`DEFAULT_SCHEDULE` for the unscheduled
    function (an empty trace), which the search measures as every non-conv task's floor."""
    if not sch.trace.insts:
        return DEFAULT_SCHEDULE
    return space_of(trace_text, spaces)


def _first_lines(text: str, limit: int = 2000) -> str:
    return text.strip()[:limit]


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
    yet (a task resumed or tuned before already had that seed pass)."""
    pending = {
        i: [
            space
            for space in spaces_of[i]
            if space.seed_trials > 0
            and space.applies_to(plan.tasks[i].mod)
            and database.count_trials(plan.workload_ids[i], space.name) == 0
        ]
        for i in active
    }
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
    result = SearchResult()
    peak = stored_peak(database.engine, target)
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
            -(plan.outlooks[i].gain if plan.outlooks[i] else 0.0),  # type: ignore[union-attr]
        ),
    )
    if on_event is not None:
        on_event("search_planned", planned_event(plan, active))
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
        _emit(on_event, "space_dropped", dropped.as_dict())
    active = [i for i in active if task_spaces.of(i)]
    if not active:
        result.reason = "no schedule space could generate designs for the tasks left"
        return result
    # The runner's worker process inherits this: it measures with the artifact's thread count.
    os.environ["TVM_NUM_THREADS"] = str(threads)
    deadline = time.monotonic() + budget_minutes * 60.0 if budget_minutes is not None else None
    budget = TrialBudget(plan, database, deadline, should_stop, result, searched_key)

    store = CostModelStore(database, seed=seed, threads=threads)
    warm = store.warm()
    if warm.source != "loaded" and warm.added:
        store.save(warm)  # The next job only adds the records measured after this one.
    if on_event is not None:
        on_event("cost_model_warm_start", warm.as_event())

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
            _emit(on_event, "search_fallback", {"message": why, "tasks": len(tasks)})
            for i in tasks:
                for space in task_spaces.of(i):
                    if space.name != DEFAULT_SPACE:
                        dropped = task_spaces.drop(
                            i, plan.tasks[i].name, space.name, f"its pass failed: {error_line(exc)}"
                        )
                        _emit(on_event, "space_dropped", dropped.as_dict() if dropped else {})
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
                _emit(on_event, "search_fallback", {"message": budget.halted, "tasks": len(left)})

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
        if on_event is not None:
            on_event("cost_model_saved", saved.as_event())
    return result


def planned_event(plan: SearchPlan, active: list[int]) -> dict[str, Any]:
    """The ``search_planned`` payload: totals, and per task to tune (in search order) its
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
    return {
        "tasks": len(plan.tasks),
        "to_tune": len(active),
        "trials": sum(plan.remaining(i) for i in active),
        "already_recorded": sum(plan.done_before),
        "rule": (
            "trials ∝ share of time × distance from the reference GFLOP/s "
            f"(within {ALLOCATION_FLOOR:g}–{ALLOCATION_CAP:g}× trials per task); "
            f"stop after {PATIENCE_BATCHES} batches without {MIN_GAIN:.0%} gain"
        ),
        "allocation": allocation,
    }


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
