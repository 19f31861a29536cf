"""The mutable trial budget of a search: each task's trials left, the wall clock, stop requests
and patience (a task whose best has not improved for ``PATIENCE_BATCHES`` batches stops, and its
unspent trials go to the tasks still improving)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from convtune.db.models import CURRENT_TIMING
from convtune.db.ms_database import SQLDatabase
from convtune.schedules.spaces.base import ScheduleSpace
from convtune.tuner.code_version import code_version
from convtune.tuner.search.allocation import SearchPlan
from convtune.tuner.search.space_check import DroppedSpace

#: Task kinds whose unscheduled function is never measured: naive loops take seconds there.
ANCHOR_KINDS = ("conv", "gemm", "matmul")

# A task stops when its best improved by less than MIN_GAIN over this many measured batches
# (and it had at least ALLOCATION_FLOOR trials).
PATIENCE_BATCHES = 3
MIN_GAIN = 0.01


@dataclass
class SearchResult:
    trials_measured: int = 0
    stopped_early: bool = False
    reason: str = ""
    paused: str = ""  # why the fleet could not measure (tracker gone): the job pauses
    #: Spaces left out of a task's search (space_check.py): each a one-line event too.
    dropped: list[DroppedSpace] = field(default_factory=list)


def exhaustion_key(spaces: Sequence[ScheduleSpace]) -> str:
    """What a workload's exhaustion is relative to: the spaces searched and the code that
    generated them (a new space or a new version may have schedules the old ones had not), and
    how trials are timed (a search that converged warm says nothing of the cold times)."""
    names = ",".join(sorted(space.name for space in spaces))
    return f"{code_version()}:{CURRENT_TIMING.value}:{names}"


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
            self.database.records.mark_exhausted(self.plan.workload_ids[index], self.searched_key)

    def wants_default(self, index: int) -> bool:
        """Whether task ``index`` is offered its floor, once a run: its unscheduled function and
        the default rule's schedule (``schedules/untuned.py``); the search measures those not
        measured before (a database from before the rule was a floor gets the rule's schedule
        measured on its next run). Every task but the anchors (conv, Gemm, MatMul, whose naive
        loops take seconds) gets them, so the build never picks a schedule slower than no search
        at all. A 1×1000 Softmax kept a 149 ms record from a search whose candidates recomputed
        the reduction per element; unscheduled, it takes microseconds (issue 30). ShuffleNet's
        channel shuffle at 112×56×56 kept a 0.113 ms record from 5 generic trials where the
        default rule runs it in 0.017-0.020 ms (Zen 4)."""
        if self.plan.tasks[index].kind in ANCHOR_KINDS or index in self.defaulted:
            return False
        self.defaulted.add(index)
        return True

    def measured(self, index: int) -> set[str]:
        if index not in self.seen:
            self.seen[index] = self.database.records.trace_keys(self.plan.workload_ids[index])
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
