"""Per-workload trial statistics: how many trials, and the best figures, in one query.

The API, the dashboard, the engine's manifest and the search's budgets all read these facts here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from .models import CURRENT_TIMING, Timing, TuningRecordRow


class RecordStats(NamedTuple):
    trials: int  # failed ones included
    best_gflops: float | None
    best_ms: float | None


NO_RECORDS = RecordStats(0, None, None)


def record_stats(
    session: Session,
    workload_ids: Iterable[int | None],
    *,
    job_id: int | None = None,
    space: str | None = None,
    timing: Timing = CURRENT_TIMING,
) -> dict[int, RecordStats]:
    """workload id → trials (failed ones included) and best figures; only the trials of
    ``job_id`` / of the schedule space ``space`` if given, and only those timed under ``timing``
    (the others count as not done: the search tunes their workloads again). Workloads without
    trials are absent."""
    ids = sorted({i for i in workload_ids if i is not None})
    if not ids:
        return {}
    query = (
        select(
            TuningRecordRow.workload_id,
            func.count(TuningRecordRow.id),
            func.max(TuningRecordRow.gflops),
            func.min(TuningRecordRow.mean_sec),
        )
        .where(TuningRecordRow.workload_id.in_(ids), TuningRecordRow.timed(timing))
        .group_by(TuningRecordRow.workload_id)
    )
    if job_id is not None:
        query = query.where(TuningRecordRow.job_id == job_id)
    if space is not None:
        query = query.where(TuningRecordRow.space == space)
    return {
        wid: RecordStats(count, best, sec * 1e3 if sec is not None else None)
        for wid, count, best, sec in session.execute(query)
    }
