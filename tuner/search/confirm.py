"""Confirm each task's fastest kernels before the build: the winner of a noisy race is lucky.

The search keeps the fastest *single* measurement of every task, each taken once, minutes apart.
On a shared VM the same kernel measures up to 2× apart from one minute to the next, so the
fastest of a hundred candidates is often one measured in a quiet moment, not the fastest kernel.
Measured on an Emerald Rapids VM (2026-12-01, ResNet-50's 1024→256 1×1 conv at 14×14, a 30-minute
search): the record chosen at 0.522 ms ran 0.84-0.86 ms when its five runners-up were timed in
rounds beside it, the runner-up recorded at 0.527 ran 0.60 ms, and in the model the chosen one
took 1.03 ms against onnxruntime's 0.51.

A space with few candidates is measured in one short stretch, and a load there decides it for
good: on a Sapphire Rapids VM (2026-12-03) the six schedules of the int8-vnni space for ResNet-50
QDQ's 2048→512 1×1 conv were all measured at 2.1-2.6 ms in one loaded second of the seed pass;
they run 0.08-0.65 ms, and the build took the generic space's 1.44 ms kernel. So each space's
fastest record of a task is re-measured too, however far behind it was recorded.

So before the build, each task's few fastest records are compiled again and timed side by side in
a fresh process, as the search timed them (``EVALUATOR``: weights flushed before every run), in
rounds whose order rotates; each candidate's figure is its median round, and every figure is
stored as a record timed :attr:`~convtune.db.models.Timing.CONFIRMED`, which the build prefers.
Where the rounds run is a :class:`CandidateTimer`: a fresh process here (:class:`LocalTimer`), or
one device of the job's fleet (``tuner/measure/timers.py``).
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from convtune.tuner.measure.timers import CandidateTimer, LocalTimer

if TYPE_CHECKING:
    from tvm.target import Target

    from convtune.db.models import TuningRecordRow
    from convtune.db.ms_database import SQLDatabase
    from convtune.tuner.graph.extract import ModelTask
    from convtune.tuner.search.builder import CandidateBuilder

#: Records re-measured per task: the fastest, and its nearest rivals.
CONFIRM_CANDIDATES = 3
#: Rivals slower than this times the fastest record are not re-measured (each costs a compile
#: of about a second): the largest error seen was the chosen 1024→256 conv above, which ran 1.6×
#: its recorded time beside its rivals.
CONFIRM_WITHIN = 1.6
#: Rounds per task; each round times every candidate once (the search's ``EVALUATOR``).
CONFIRM_ROUNDS = 5
#: Seconds to compile and time one candidate, the first guess of a job's confirmation cost (the
#: job then goes by its own rate): ResNet-50 on an Emerald Rapids VM, 102 candidates in 2.3 min.
CONFIRM_SECONDS_PER_CANDIDATE = 1.4
#: Candidates built and timed before the deadline is looked at again (each chunk is a child
#: process; a 24-candidate chunk is about half a minute).
CONFIRM_CHUNK = 24
#: The most of a job's time budget the search leaves to confirmation.
CONFIRM_MAX_SHARE = 0.15


@dataclass(frozen=True)
class Confirmation:
    """What re-measuring one task's fastest records changed."""

    task: str
    workload_id: int
    recorded_ms: float  # the fastest single measurement, as the search left it
    confirmed_ms: float  # the chosen record's median round
    candidates: int
    changed: bool  # another record than the recorded fastest was chosen

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _alternative_groups(tasks: Sequence[ModelTask]) -> list[list[int]]:
    """Task indices grouped so that a conv's alternatives (its direct and Winograd tasks, which
    share convs) are in one group; every other task alone."""
    group_of: dict[int, int] = {}  # conv -> group
    groups: list[list[int]] = []
    for index, task in enumerate(tasks):
        found = sorted({group_of[c] for c in task.convs if c in group_of})
        if not found:
            groups.append([index])
            target = len(groups) - 1
        else:
            target = found[0]
            groups[target].append(index)
            for other in found[1:]:
                groups[target].extend(groups[other])
                groups[other] = []
                for conv, g in group_of.items():
                    if g == other:
                        group_of[conv] = target
        for conv in task.convs:
            group_of[conv] = target
    return [sorted(g) for g in groups if g]


@dataclass
class _Candidate:
    index: int  # the task's
    row: TuningRecordRow
    library: str | None = None


@dataclass
class ConfirmReport:
    """What confirmation did: the tasks it re-measured, and those its time did not reach."""

    confirmations: list[Confirmation] = field(default_factory=list)
    #: Tasks with rivals left unconfirmed because the job's deadline came first (the largest
    #: share of the model's time goes first); they build on their fastest trial.
    out_of_time: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line for logs and events: how many tasks were confirmed and how many changed."""
        left = (
            f"; {len(self.out_of_time)} task(s) left unconfirmed: the budget ran out"
            if self.out_of_time
            else ""
        )
        if not self.confirmations:
            return f"none confirmed{left}" if self.out_of_time else "no task had rivals to confirm"
        changed = [c for c in self.confirmations if c.changed]
        return (
            f"{len(self.confirmations)} task(s) re-measured side by side, "
            f"{len(changed)} chose another record than the fastest single measurement{left}"
        )


def confirm_reserve_minutes(tasks: Sequence[ModelTask], budget_minutes: float) -> float:
    """The part of a job's ``budget_minutes`` the search leaves to confirmation: every task's
    candidates at :data:`CONFIRM_SECONDS_PER_CANDIDATE`, at most :data:`CONFIRM_MAX_SHARE` of
    the budget (a short job searches first; confirmation then stops at the deadline)."""
    candidates = CONFIRM_CANDIDATES * len(tasks)
    wanted = candidates * CONFIRM_SECONDS_PER_CANDIDATE / 60.0
    return min(wanted, CONFIRM_MAX_SHARE * budget_minutes)


def _plan_share(plan: Sequence[_Candidate], tasks: Sequence[ModelTask]) -> float:
    """Seconds per inference the group takes with its fastest record (a conv runs as its fastest
    alternative); what confirming the group can save is a share of this."""
    return min(c.row.mean_sec * max(1, tasks[c.index].occurrences) for c in plan)


def _chunks(plans: Sequence[list[_Candidate]], size: int) -> list[list[list[_Candidate]]]:
    """Consecutive plans packed into chunks of at most ``size`` candidates (a plan larger than
    ``size`` is a chunk of its own): each chunk is built and timed before the clock is read."""
    chunks: list[list[list[_Candidate]]] = []
    count = size
    for plan in plans:
        if count + len(plan) > size:
            chunks.append([])
            count = 0
        chunks[-1].append(plan)
        count += len(plan)
    return chunks


def confirm_tasks(
    tasks: Sequence[ModelTask],
    workload_ids: Sequence[int],
    database: SQLDatabase,
    target: Target,
    *,
    threads: int,
    timer: CandidateTimer | None = None,
    candidates: int = CONFIRM_CANDIDATES,
    rounds: int = CONFIRM_ROUNDS,
    should_stop: Callable[[], bool] | None = None,
    deadline: float | None = None,
) -> ConfirmReport:
    """Re-measure side by side, per group of alternatives (a conv's direct and Winograd tasks;
    any other task alone), each task's fastest records within :data:`CONFIRM_WITHIN` of its
    best, at most ``candidates`` per task, and each space's fastest record, on ``timer`` (this
    host's :class:`LocalTimer` by default); store every figure (:meth:`record_confirmation`).

    Groups go in order of the model time they hold, in chunks of about
    :data:`CONFIRM_CHUNK` candidates; with a ``deadline`` (``time.monotonic()``), a chunk that
    would end past it, by the seconds per candidate measured so far, is not started and its
    tasks are reported :attr:`ConfirmReport.out_of_time`.

    A group whose tasks are all confirmed since their last trial is skipped, so a build with
    nothing new measured chooses what it chose before. A candidate that no longer compiles is
    left out; a group left with one candidate is not confirmed.
    """
    plans: list[list[_Candidate]] = []
    for members in _alternative_groups(tasks):
        if all(database.records.confirmed_record(workload_ids[i]) is not None for i in members):
            continue
        chosen = []
        for i in members:
            rows = database.records.fastest_records(workload_ids[i], candidates)
            if rows:
                bound = CONFIRM_WITHIN * rows[0].mean_sec
                rows = [row for row in rows if row.mean_sec <= bound]
                ids = {row.id for row in rows}
                rows += [
                    row
                    for row in database.records.fastest_of_each_space(workload_ids[i])
                    if row.id not in ids
                ]
                chosen += [_Candidate(i, row) for row in rows]
        if len(chosen) >= 2:
            plans.append(chosen)
    report = ConfirmReport()
    if not plans:
        return report
    plans.sort(key=lambda plan: -_plan_share(plan, tasks))
    timer = timer or LocalTimer(threads)
    from convtune.tuner.search.builder import CandidateBuilder

    builder = CandidateBuilder(max_workers=max(threads, len(os.sched_getaffinity(0))))
    per_candidate_s = CONFIRM_SECONDS_PER_CANDIDATE
    spent_s, done = 0.0, 0
    try:
        chunks = _chunks(plans, CONFIRM_CHUNK)
        for k, chunk in enumerate(chunks):
            if should_stop is not None and should_stop():
                break
            size = sum(len(plan) for plan in chunk)
            if deadline is not None and time.monotonic() + size * per_candidate_s > deadline:
                report.out_of_time.extend(
                    tasks[i].name
                    for later in chunks[k:]
                    for plan in later
                    for i in sorted({c.index for c in plan})
                )
                break
            started = time.monotonic()
            report.confirmations.extend(
                _confirm_chunk(chunk, tasks, database, target, builder, timer, rounds)
            )
            spent_s += time.monotonic() - started
            done += size
            per_candidate_s = spent_s / done
    finally:
        builder.shutdown()
    return report


def _confirm_chunk(
    plans: Sequence[list[_Candidate]],
    tasks: Sequence[ModelTask],
    database: SQLDatabase,
    target: Target,
    builder: CandidateBuilder,
    timer: CandidateTimer,
    rounds: int,
) -> list[Confirmation]:
    """Build, time and record one chunk of groups (:func:`confirm_tasks`)."""
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    replayable: list[list[tuple[_Candidate, Any]]] = []
    for plan in plans:
        # A trace that no longer replays (a space changed since) is no candidate.
        schedules = [database.records.replayed_schedule(c.row, tasks[c.index].mod) for c in plan]
        kept = [(c, sch) for c, sch in zip(plan, schedules, strict=True) if sch is not None]
        if len(kept) >= 2:
            replayable.append(kept)
    mods = [BuilderInput(sch.mod, target) for kept in replayable for _, sch in kept]
    built = iter(builder.build(mods)) if mods else iter(())
    groups: list[list[_Candidate]] = []
    everything = [c for kept in replayable for c, _ in kept]
    for kept in replayable:
        for c, _ in kept:
            c.library = next(built).artifact_path
        ok = [c for c, _ in kept if c.library is not None]
        if len(ok) >= 2:
            groups.append(ok)
    try:
        if not groups:
            return []
        spec = [[{"library": c.library, "args_info": c.row.args_info} for c in g] for g in groups]
        timed = timer.time_groups(spec, rounds)
    finally:  # every built candidate, measured or not
        for c in everything:
            if c.library is not None:
                _remove_candidate(str(c.library))
    confirmations = []
    for group, per_candidate in zip(groups, timed, strict=True):
        for c, secs in zip(group, per_candidate, strict=True):
            database.records.record_confirmation(c.row, secs, device=timer.device)
        for i in sorted({c.index for c in group}):
            mine = [
                (statistics.median(secs), c)
                for c, secs in zip(group, per_candidate, strict=True)
                if c.index == i
            ]
            best_sec, best = min(mine, key=lambda pair: (pair[0], pair[1].row.mean_sec))
            confirmations.append(
                Confirmation(
                    task=tasks[i].name,
                    workload_id=mine[0][1].row.workload_id,
                    recorded_ms=mine[0][1].row.mean_sec * 1e3,
                    confirmed_ms=best_sec * 1e3,
                    candidates=len(mine),
                    changed=best is not mine[0][1],
                )
            )
    return confirmations


def _remove_candidate(path: str) -> None:
    """Delete a built candidate with the temporary directory ``build_candidate`` made for it."""
    candidate = Path(path)
    if candidate.parent.name.startswith("convtune-cand-"):
        shutil.rmtree(candidate.parent, ignore_errors=True)
    else:
        candidate.unlink(missing_ok=True)


def not_confirmed(why: str) -> str:
    """The event's line for a build without confirmation, saying why."""
    return f"not confirmed ({why}); the build uses the fastest trials"
