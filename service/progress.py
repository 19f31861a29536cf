"""Overall progress of a tuning run, read from the engine's events: the CLI's live view, its
plain per-batch lines when stdout is not a terminal, and the worker's lines in the server log
all come from here, so they say the same thing."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from convtune.tuner.tables import clock

#: Events that move a job to its next phase: the CLI and the worker log a line for each.
PHASE_EVENTS = ("search_planned", "confirmed", "build_started", "verified")
#: Events that say, in their payload's one-line ``message``, where the job fell back at the
#: smallest scope (a space dropped for one task, a pass in the generic space, a build without
#: Winograd or records, a model compiled NCHW): the CLI and the worker print each as a note.
NOTICE_EVENTS = ("layout_fallback", "space_dropped", "search_fallback", "build_fallback")


def notice(kind: str, payload: dict[str, Any]) -> str | None:
    """The one line a :data:`NOTICE_EVENTS` event says; None for any other event."""
    return str(payload.get("message", kind)) if kind in NOTICE_EVENTS else None


@dataclass
class TuneProgress:
    """Trials done / planned, elapsed, budget left and an ETA, updated by ``update(kind, payload)``.

    ``trials_done`` counts the trials of the tasks reported so far (their recorded trials,
    earlier runs included) plus, for a resumed run, the trials recorded before it of tasks not
    reported yet; ``trials_total`` is what the plan needs in all.
    """

    budget_minutes: float | None = None
    started: float = field(default_factory=time.monotonic)
    planned: int = 0
    recorded_before: int = 0
    per_task: dict[int, dict[str, Any]] = field(default_factory=dict)
    last: dict[str, Any] | None = None
    phase: str = "extracting tasks"
    searching: bool = True

    def update(self, kind: str, payload: dict[str, Any]) -> None:
        if kind == "search_planned":
            self.planned = int(payload.get("trials", 0))
            self.recorded_before = int(payload.get("already_recorded", 0))
            self.phase = f"tuning {payload.get('to_tune')} of {payload.get('tasks')} tasks"
        elif kind == "trial_batch":
            self.per_task[int(payload["task_index"])] = payload
            self.last = payload
        elif kind == "confirmed":
            self.phase = f"confirmed: {payload.get('summary', '')}"
        elif kind == "build_started":
            self.phase = f"building ({payload.get('trials_measured', 0)} trials measured)"
            self.searching = False
        elif kind == "verified":
            self.phase = "verified against onnxruntime"

    @property
    def trials_total(self) -> int:
        return self.planned + self.recorded_before

    @property
    def trials_done(self) -> int:
        seen = sum(int(p.get("trials", 0)) for p in self.per_task.values())
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
        p = self.last or {}
        best = p.get("best_gflops")
        task = (
            f"{p.get('task', '?')} ({p.get('op', '')} {p.get('shape', '')}) "
            f"{p.get('trials', 0)}/{p.get('budget', 0)}, best "
            + (f"{best:.1f} GFLOP/s ({p.get('best_ms') or 0:.4f} ms)" if best else "none yet")
        )
        errors = f", {p['errors']} failed" if p.get("errors") else ""
        return f"{self.summary()} · {task}{errors}"
