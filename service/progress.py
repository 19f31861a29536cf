"""Overall progress of a tuning run, read from the engine's events: the CLI's live view, its
plain per-batch lines when stdout is not a terminal, and the worker's lines in the server log
all come from here, so they say the same thing."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from convtune.tuner.events import (
    BuildStarted,
    Confirmed,
    Event,
    SearchPlanned,
    TrialBatch,
    Verified,
)
from convtune.tuner.tables import clock


@dataclass
class TuneProgress:
    """Trials done / planned, elapsed, budget left and an ETA, updated by ``update(event)``.

    ``trials_done`` counts the trials of the tasks reported so far (their recorded trials,
    earlier runs included) plus, for a resumed run, the trials recorded before it of tasks not
    reported yet; ``trials_total`` is what the plan needs in all.
    """

    budget_minutes: float | None = None
    started: float = field(default_factory=time.monotonic)
    planned: int = 0
    recorded_before: int = 0
    per_task: dict[int, TrialBatch] = field(default_factory=dict)
    last: TrialBatch | None = None
    phase: str = "extracting tasks"
    searching: bool = True

    def update(self, event: Event) -> None:
        match event:
            case SearchPlanned():
                self.planned = int(event.trials)
                self.recorded_before = int(event.already_recorded)
                self.phase = f"tuning {event.to_tune} of {event.tasks} tasks"
            case TrialBatch():
                self.per_task[int(event.task_index)] = event
                self.last = event
            case Confirmed():
                self.phase = f"confirmed: {event.summary}"
            case BuildStarted():
                self.phase = f"building ({event.trials_measured} trials measured)"
                self.searching = False
            case Verified():
                self.phase = "verified against onnxruntime"

    @property
    def trials_total(self) -> int:
        return self.planned + self.recorded_before

    @property
    def trials_done(self) -> int:
        seen = sum(int(p.trials) for p in self.per_task.values())
        return min(max(seen, self.recorded_before), self.trials_total or seen)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def budget_left(self) -> float | None:
        if self.budget_minutes is None:
            return None
        return max(0.0, self.budget_minutes * 60.0 - self.elapsed())

    def eta(self) -> float | None:
        """Seconds to the end of the search at the rate so far, capped by the time budget."""
        new = self.trials_done - self.recorded_before
        left = self.trials_total - self.trials_done
        if new <= 0 or self.trials_total <= 0:
            return self.budget_left()
        eta = self.elapsed() / new * left
        budget = self.budget_left()
        return min(eta, budget) if budget is not None else eta

    def summary(self) -> str:
        """``trials 24/36 (67%) · elapsed 0:42 · budget left 9:18 · ETA 0:21``"""
        total = self.trials_total
        parts = [
            f"trials {self.trials_done}/{total}"
            + (f" ({100 * self.trials_done // total}%)" if total else "")
        ]
        parts.append(f"elapsed {clock(self.elapsed())}")
        budget = self.budget_left()
        if budget is not None:
            parts.append(f"budget left {clock(budget)}")
        eta = self.eta() if self.searching else None
        if eta is not None:
            parts.append(f"ETA {clock(eta)}")
        return " · ".join(parts)

    def batch_line(self) -> str:
        """One line for the batch just measured: the overall summary, then that task's best."""
        p = self.last
        if p is None:
            return f"{self.summary()} · ? ( ) 0/0, best none yet"
        best = p.best_gflops
        if best:
            found = f"{best:.1f} GFLOP/s ({p.best_ms or 0:.4f} ms)"
        else:  # a kernel without FLOPs (a pad, a copy) has a time and no rate
            found = f"{p.best_ms:.4f} ms" if p.best_ms else "none yet"
        task = f"{p.task} ({p.op} {p.shape}) {p.trials}/{p.budget}, best {found}"
        errors = f", {p.errors} failed" if p.errors else ""
        return f"{self.summary()} · {task}{errors}"
