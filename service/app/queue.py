"""The job queue in the database: claim, heartbeat, requeue of stale jobs, cancel, finish.

Every transition is a conditional ``UPDATE`` checked by its row count, so two workers (or a worker
and the API) racing for one job cannot both win, on SQLite as on PostgreSQL. PostgreSQL also
locks the candidate row with ``SELECT … FOR UPDATE SKIP LOCKED`` so concurrent claimers pick
different jobs instead of colliding. Each transition writes a ``job_events`` row in the same
transaction, so an SSE reader that sees a terminal status has already seen every event before it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import ColumnElement, CursorResult, Update, delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from convtune.db.models import (
    TERMINAL_STATUSES,
    JobEventRow,
    JobRow,
    JobStatus,
    WorkerRow,
    utcnow,
)
from convtune.tuner.events import (
    Cancelled,
    CancelRequested,
    Claimed,
    Event,
    EventKind,
    Released,
    job_ended,
)

from .core.errors import ApiError

log = logging.getLogger(__name__)

SessionFactory = sessionmaker[Session]


def _held_by(job_id: int, worker_id: str) -> tuple[ColumnElement[bool], ...]:
    """The job is running and claimed by ``worker_id`` (a requeued job is no longer its)."""
    return (JobRow.id == job_id, JobRow.worker_id == worker_id, JobRow.status == JobStatus.RUNNING)


def _changed(session: Session, statement: Update) -> int:
    """Rows a conditional UPDATE changed: how every state change here checks it won the race."""
    return cast("CursorResult[Any]", session.execute(statement)).rowcount


def _jsonable(payload: dict[str, Any] | None) -> dict[str, Any]:
    """Payloads come from the engine (numpy floats, paths): store what JSON can hold."""
    return json.loads(json.dumps(payload or {}, default=str))


def append_event(session: Session, job_id: int, event: Event) -> None:
    """Add an event to ``session`` (the caller commits, together with its state change)."""
    session.add(JobEventRow(job_id=job_id, kind=event.kind, payload=_jsonable(event.as_dict())))


def record_event(factory: SessionFactory, job_id: int, event: Event) -> None:
    """Write and commit one event on its own."""
    with factory() as session:
        append_event(session, job_id, event)
        session.commit()


def _fair_order(session: Session) -> list[int]:
    """Queued job ids in claim order: round-robin over clients, each client's oldest first.

    The client served longest ago (its latest ``started_at``; never served first) goes first;
    ties go to the client whose oldest queued job is older. A client with 700,000 trials queued
    no longer keeps another's 1-trial job waiting behind all of it.
    """
    queued = session.execute(
        select(JobRow.id, JobRow.owner).where(JobRow.status == JobStatus.QUEUED).order_by(JobRow.id)
    ).all()
    if not queued:
        return []
    owners = {owner for _, owner in queued}
    served: dict[str, datetime | None] = {
        owner: last
        for owner, last in session.execute(
            select(JobRow.owner, func.max(JobRow.started_at))
            .where(JobRow.owner.in_(owners), JobRow.started_at.is_not(None))
            .group_by(JobRow.owner)
        )
    }
    per_owner: dict[str, list[int]] = {}
    for job_id, owner in queued:
        per_owner.setdefault(owner, []).append(job_id)
    epoch = datetime.min.replace(tzinfo=UTC)

    def turn(owner: str) -> tuple[datetime, int]:
        last = served.get(owner)
        if last is not None and last.tzinfo is None:
            last = last.replace(tzinfo=UTC)
        return (last or epoch, per_owner[owner][0])

    order: list[int] = []
    for owner in sorted(per_owner, key=turn):
        order.extend(per_owner[owner])
    return order


def claim_next(factory: SessionFactory, worker_id: str) -> int | None:
    """Mark the next queued job (``_fair_order``) running for ``worker_id``; None if none.

    PostgreSQL: the candidate row is locked (``FOR UPDATE SKIP LOCKED``), so a row another
    claimer holds is skipped and the update always wins. SQLite: no row locks; a claimer that
    loses the conditional update to another tries the next candidate, so it returns None only
    when nothing is queued.
    """
    with factory() as session:
        for candidate in _fair_order(session):
            job_id = session.scalar(
                select(JobRow.id)
                .where(JobRow.id == candidate, JobRow.status == JobStatus.QUEUED)
                .with_for_update(skip_locked=True)  # SQLite renders nothing
            )
            if job_id is None:
                continue
            now = utcnow()
            claimed = _changed(
                session,
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.status == JobStatus.QUEUED)
                .values(
                    status=JobStatus.RUNNING,
                    worker_id=worker_id,
                    started_at=now,
                    heartbeat_at=now,
                    finished_at=None,
                    error=None,
                ),
            )
            if claimed != 1:
                session.rollback()
                continue
            attempts = session.scalar(select(JobRow.attempts).where(JobRow.id == job_id))
            append_event(session, job_id, Claimed(worker_id=worker_id, attempt=attempts))
            session.commit()
            return job_id
        session.rollback()
        return None


def worker_alive(
    factory: SessionFactory, worker_id: str, *, job_id: int | None = None, pid: int = 0
) -> None:
    """Record that ``worker_id`` is alive now (and which job it runs): ``/healthz`` counts the
    workers whose row is fresher than ``stale_after_seconds``."""
    now = utcnow()
    with factory() as session:
        done = _changed(
            session,
            update(WorkerRow)
            .where(WorkerRow.worker_id == worker_id)
            .values(heartbeat_at=now, job_id=job_id),
        )
        if done == 0:
            host = worker_id.split(":", 1)[0]
            session.add(
                WorkerRow(worker_id=worker_id, host=host, pid=pid, heartbeat_at=now, job_id=job_id)
            )
        session.commit()


def worker_gone(factory: SessionFactory, worker_id: str) -> None:
    """Remove a worker's row as it exits; rows of killed workers are pruned by age."""
    with factory() as session:
        session.execute(delete(WorkerRow).where(WorkerRow.worker_id == worker_id))
        session.commit()


def prune_workers(factory: SessionFactory, older_than_seconds: float) -> int:
    """Delete rows of workers that stopped heartbeating long ago (killed, host gone)."""
    cutoff = utcnow() - timedelta(seconds=older_than_seconds)
    with factory() as session:
        gone = cast(
            "CursorResult[Any]",
            session.execute(delete(WorkerRow).where(WorkerRow.heartbeat_at < cutoff)),
        ).rowcount
        session.commit()
        return gone


@dataclass(frozen=True)
class Beat:
    """What a heartbeat learned: the job is still ours (``alive``) and whether to cancel it."""

    alive: bool
    cancel_requested: bool


def heartbeat(factory: SessionFactory, job_id: int, worker_id: str) -> Beat:
    """Refresh the job's ``heartbeat_at`` if ``worker_id`` still owns it while running."""
    with factory() as session:
        owned = _changed(
            session,
            update(JobRow).where(*_held_by(job_id, worker_id)).values(heartbeat_at=utcnow()),
        )
        session.commit()
        if owned != 1:
            return Beat(alive=False, cancel_requested=False)
        cancel = session.scalar(select(JobRow.cancel_requested).where(JobRow.id == job_id))
        return Beat(alive=True, cancel_requested=bool(cancel))


def requeue_stale(
    factory: SessionFactory, stale_after_seconds: float, max_attempts: int
) -> list[int]:
    """Put running jobs whose worker stopped heartbeating back in the queue (``attempts`` + 1).

    A job whose cancel was requested becomes ``cancelled``; one that reaches ``max_attempts``
    becomes ``failed`` instead of killing workers forever. Returns the ids that were moved.
    """
    cutoff = utcnow() - timedelta(seconds=stale_after_seconds)
    moved = []
    with factory() as session:
        stale = session.execute(
            select(JobRow.id, JobRow.attempts, JobRow.cancel_requested, JobRow.worker_id).where(
                JobRow.status == JobStatus.RUNNING, JobRow.heartbeat_at < cutoff
            )
        ).all()
        for job_id, attempts, cancel, worker_id in stale:
            attempts = attempts + 1
            values: dict[str, Any] = {"worker_id": None, "attempts": attempts}
            payload = {"worker_id": worker_id, "attempts": attempts}
            if cancel:
                kind = values["status"] = JobStatus.CANCELLED
                values["finished_at"] = utcnow()
            elif attempts >= max_attempts:
                kind = values["status"] = JobStatus.FAILED
                values["finished_at"] = utcnow()
                values["error"] = f"its worker stopped heartbeating {attempts} times; giving up"
                payload["error"] = values["error"]
            else:
                values["status"] = JobStatus.QUEUED
                kind = EventKind.REQUEUED
            done = _changed(
                session,
                update(JobRow)
                .where(
                    JobRow.id == job_id,
                    JobRow.status == JobStatus.RUNNING,
                    JobRow.heartbeat_at < cutoff,
                )
                .values(**values),
            )
            if done == 1:
                append_event(session, job_id, job_ended(kind, payload))
                moved.append(job_id)
                log.warning("job %d: worker %s is gone → %s", job_id, worker_id, kind)
        session.commit()
    return moved


def finish(
    factory: SessionFactory,
    job_id: int,
    worker_id: str,
    status: str,
    *,
    error: str | None = None,
    artifact_id: int | None = None,
    payload: dict[str, Any] | None = None,
) -> bool:
    """End a job this worker owns (terminal ``status``); False if it was taken from us meanwhile."""
    assert status in TERMINAL_STATUSES
    with factory() as session:
        done = _changed(
            session,
            update(JobRow)
            .where(*_held_by(job_id, worker_id))
            .values(status=status, error=error, artifact_id=artifact_id, finished_at=utcnow()),
        )
        if done == 1:
            body = dict(payload or {})
            if error is not None:
                body["error"] = error
            if artifact_id is not None:
                body["artifact_id"] = artifact_id
            append_event(session, job_id, job_ended(status, body))
        session.commit()
        return done == 1


def release(factory: SessionFactory, job_id: int, worker_id: str, reason: str) -> bool:
    """Give a job back to the queue (worker shutting down); no attempt is counted."""
    with factory() as session:
        done = _changed(
            session,
            update(JobRow)
            .where(*_held_by(job_id, worker_id))
            .values(status=JobStatus.QUEUED, worker_id=None),
        )
        if done == 1:
            append_event(session, job_id, Released(worker_id=worker_id, reason=reason))
        session.commit()
        return done == 1


def request_cancel(session: Session, job_id: int) -> None:
    """Cancel a queued job now; ask the worker of a running one to stop (it polls the flag).

    Raises 409 for a job that already ended. Commits.
    """
    now = utcnow()
    cancelled = _changed(
        session,
        update(JobRow)
        .where(JobRow.id == job_id, JobRow.status == JobStatus.QUEUED)
        .values(status=JobStatus.CANCELLED, cancel_requested=True, finished_at=now),
    )
    if cancelled == 1:
        append_event(session, job_id, Cancelled(while_=JobStatus.QUEUED))
        session.commit()
        return
    flagged = _changed(
        session,
        update(JobRow)
        .where(JobRow.id == job_id, JobRow.status == JobStatus.RUNNING)
        .values(cancel_requested=True),
    )
    if flagged == 1:
        append_event(session, job_id, CancelRequested())
        session.commit()
        return
    session.rollback()
    status = session.scalar(select(JobRow.status).where(JobRow.id == job_id))
    raise ApiError(409, "job_finished", f"job {job_id} already ended ({status})")
