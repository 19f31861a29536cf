"""``GET /healthz``: the database answers and someone will run queued jobs.

200 with the live workers (heartbeat within ``stale_after_seconds``) and the age of the oldest
queued job; 503 ``database_unreachable`` when the database does not answer, 503 ``no_worker``
when no worker is alive although one is expected (``serve`` starts ``CONVTUNE_WORKERS`` > 0) or
jobs are waiting. The dashboard's models page shows the same figures (``service_health``).
"""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter
from pydantic import BaseModel
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from convtune.db.models import JobRow, JobStatus, WorkerRow, utcnow

from ...core.config import Settings
from ...core.errors import ApiError
from ...schemas import ErrorOut
from ..deps import EngineDep, SessionDep, SettingsDep

router = APIRouter(tags=["health"])


class HealthOut(BaseModel):
    status: str
    database: str
    workers_alive: int
    oldest_queued_seconds: float | None

    @property
    def stalled(self) -> bool:
        return self.status != "ok"


def service_health(session: Session, settings: Settings) -> HealthOut:
    """Live workers and the oldest queued job's age; status ``no_worker`` when nobody will
    run jobs that are waiting or expected. Raises ``SQLAlchemyError`` if the database fails."""
    now = utcnow()
    alive = session.scalar(
        select(func.count(WorkerRow.id)).where(
            WorkerRow.heartbeat_at >= now - timedelta(seconds=settings.stale_after_seconds)
        )
    )
    oldest = session.scalar(
        select(func.min(JobRow.created_at)).where(JobRow.status == JobStatus.QUEUED)
    )
    if oldest is not None and oldest.tzinfo is None:  # SQLite through func.min loses the type
        oldest = oldest.replace(tzinfo=now.tzinfo)
    age = (now - oldest).total_seconds() if oldest is not None else None
    stalled = not alive and (settings.workers > 0 or age is not None)
    return HealthOut(
        status="no_worker" if stalled else "ok",
        database=session.get_bind().dialect.name,
        workers_alive=alive or 0,
        oldest_queued_seconds=age,
    )


@router.get("/healthz", response_model=HealthOut, responses={503: {"model": ErrorOut}})
def healthz(engine: EngineDep, session: SessionDep, settings: SettingsDep) -> HealthOut:
    try:
        health = service_health(session, settings)
    except SQLAlchemyError as exc:
        message = f"the database does not answer ({type(exc).__name__})"
        raise ApiError(503, "database_unreachable", message) from None
    if health.stalled:
        age = health.oldest_queued_seconds
        waiting = f"; the oldest queued job waits since {age:.0f} s" if age is not None else ""
        raise ApiError(503, "no_worker", f"no tuning worker is alive{waiting}")
    return health
