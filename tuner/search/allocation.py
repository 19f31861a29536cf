"""How a model's trials are shared among its tasks: by expected gain, (the task's share of the
model's time) × (its distance from the best GFLOP/s known for its kind of workload, or from peak),
largest first, within a floor and a cap per task."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from convtune.db.ms_database import SQLDatabase
from convtune.tuner.graph.extract import ModelTask
from convtune.tuner.options import task_budget

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


def reference_rates(
    database: SQLDatabase, peak_gflops: float | None, percentile: float = 90.0
) -> dict[str | None, float]:
    """Kind of task -> the GFLOP/s a good schedule of that kind reaches on this target.

    The ``percentile`` of the best rates of the target's workloads of that kind (not the maximum:
    one noisy trial should not set the bar), capped by the peak; kinds never measured map to
    the peak (key None).
    """
    by_kind: dict[str | None, list[float]] = {}
    for kind, gflops in database.records.best_gflops_by_workload().values():
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
    workload_ids = [database.records.workload_id(task.mod, task.name) for task in tasks]
    budgets = [task_budget(task.kind, trials_per_task) for task in tasks]
    # A retune asks for `budget` new trials on top of what is recorded.
    done = (
        [0] * len(tasks) if retune else [database.records.count_trials(wid) for wid in workload_ids]
    )
    rates = reference_rates(database, peak_gflops)
    outlooks: list[TaskOutlook | None] = []
    for task, wid in zip(tasks, workload_ids, strict=True):
        best = database.records.best_record(wid)
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
            if database.records.exhausted_key(wid) == searched_key:
                budgets[i] = min(budgets[i], done[i])
    return SearchPlan(list(tasks), workload_ids, budgets, done, outlooks, caps)
