"""Chart series computed on the server so pages stay small with tens of thousands of trials.

The best-so-far curve is exact: a step function only needs the trials where the best improved
(plus the last trial to carry the line to the end). The scatter of every trial is thinned to at
most ``limit`` points by keeping, per bucket of consecutive trials, the fastest and the slowest
success and the first failure, so outliers and failures stay visible.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

MAX_POINTS = 2000


@dataclass(frozen=True)
class Trial:
    """One measured candidate, in measurement order (``n`` counts from 1)."""

    n: int
    seconds: float  # wall-clock time since the workload's first trial
    gflops: float | None  # None: failed, or FLOPs unknown
    failed: bool
    record_id: int


def trials_from_rows(
    rows: list[tuple[int, datetime, float | None, float | None, str | None]],
    start: datetime | None = None,
) -> list[Trial]:
    """``(record id, created_at, mean_sec, gflops, error)`` rows in id order → trials.

    ``seconds`` counts from ``start`` (the job's start), else from the first row: each trial's
    own recorded time, so a layer tuned late in a job shows late, not at 0."""
    if not rows:
        return []
    start = start if start is not None else rows[0][1]
    return [
        Trial(
            n=i + 1,
            seconds=(created - start).total_seconds(),
            gflops=gflops,
            failed=mean_sec is None or error is not None,
            record_id=rid,
        )
        for i, (rid, created, mean_sec, gflops, error) in enumerate(rows)
    ]


def best_so_far(trials: list[Trial]) -> list[Trial]:
    """The trials where the best GFLOP/s improved, then the last trial (as a step's end).

    Drawn as a horizontal-then-vertical step line, these points are the exact curve. The last
    point carries the running best, not its own value."""
    steps: list[Trial] = []
    best: float | None = None
    for trial in trials:
        if trial.gflops is not None and (best is None or trial.gflops > best):
            best = trial.gflops
            steps.append(trial)
    if steps and trials[-1].n != steps[-1].n:
        last = trials[-1]
        steps.append(Trial(last.n, last.seconds, best, False, last.record_id))
    return steps


def thin(trials: list[Trial], limit: int = MAX_POINTS) -> list[Trial]:
    """All trials when there are at most ``limit``; else at most ``limit`` representatives."""
    if len(trials) <= limit:
        return trials
    buckets = max(1, limit // 3)
    size = -(-len(trials) // buckets)
    kept: list[Trial] = []
    for start in range(0, len(trials), size):
        chunk = trials[start : start + size]
        ok = [t for t in chunk if t.gflops is not None and not t.failed]
        picks = {id(t): t for t in ((max(ok, key=_g), min(ok, key=_g)) if ok else ())}
        failed = next((t for t in chunk if t.failed), None)
        if failed is not None:
            picks[id(failed)] = failed
        kept.extend(sorted(picks.values(), key=lambda t: t.n))
    return kept[:limit]


def _g(trial: Trial) -> float:
    return trial.gflops or 0.0


def as_columns(trials: list[Trial]) -> dict[str, list]:
    """Column-oriented JSON for Plotly (one list per axis)."""
    return {
        "n": [t.n for t in trials],
        "seconds": [round(t.seconds, 3) for t in trials],
        "gflops": [t.gflops for t in trials],
        "failed": [t.failed for t in trials],
    }
