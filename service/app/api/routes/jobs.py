"""``/api/jobs``: status with per-layer progress, cancel, and a server-sent event stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from convtune.db.models import TERMINAL_STATUSES, JobEventRow, JobRow

from ... import crud, queue
from ...core.errors import not_found
from ...dbbusy import with_retries
from ...schemas import JobOut, error_responses
from ..deps import MAX_ROW_ID, ListLimit, ReaderDep, RowId, SessionDep, SettingsDep, WriterDep

router = APIRouter(prefix="/jobs", tags=["jobs"])

_ERRORS = error_responses(401, 403, 404, 409, 422, 503)
_EVENT_BATCH = 500
# Comment lines keep proxies from closing an idle stream while a long task compiles.
_KEEPALIVE_SECONDS = 15.0


@router.get("", response_model=list[JobOut])
def list_jobs(
    session: SessionDep,
    _: ReaderDep,
    model_id: Annotated[int | None, Query(ge=1, le=MAX_ROW_ID)] = None,
    limit: ListLimit = 100,
) -> list[JobOut]:
    return [
        crud.job_out(session, job)
        for job in crud.list_jobs(session, model_id=model_id, limit=limit)
    ]


@router.get("/{job_id}", response_model=JobOut, responses=_ERRORS)
def get_job(job_id: RowId, session: SessionDep, _: ReaderDep) -> JobOut:
    return crud.job_out(session, crud.get_job(session, job_id))


@router.post("/{job_id}/cancel", response_model=JobOut, responses=_ERRORS)
def cancel_job(job_id: RowId, session: SessionDep, settings: SettingsDep, _: WriterDep) -> JobOut:
    """Cancel a queued job at once; a running one stops at its worker's next check.

    409 when the job already ended."""

    def cancel() -> None:
        session.rollback()
        crud.get_job(session, job_id)
        queue.request_cancel(session, job_id)

    with_retries(cancel, settings.db_busy_retries)
    session.expire_all()
    return crud.job_out(session, crud.get_job(session, job_id))


def _status_of(session: Session, job_id: int) -> str | None:
    return session.scalar(select(JobRow.status).where(JobRow.id == job_id))


def _status(sessions: sessionmaker[Session], job_id: int) -> str | None:
    with sessions() as session:
        return _status_of(session, job_id)


def _poll(
    sessions: sessionmaker[Session], job_id: int, after_id: int
) -> tuple[str | None, Sequence[JobEventRow]]:
    # Status before events: a terminal status read here implies its event is in the batch.
    with sessions() as session:
        return _status_of(session, job_id), crud.events_after(
            session, job_id, after_id, limit=_EVENT_BATCH
        )


def format_event(event: JobEventRow) -> str:
    data = {
        "id": event.id,
        "job_id": event.job_id,
        "kind": event.kind,
        "payload": event.payload,
        "created_at": event.created_at.isoformat(),
    }
    return f"id: {event.id}\nevent: {event.kind}\ndata: {json.dumps(data)}\n\n"


def _resume_point(last_event_id: str | None, after: int | None) -> int:
    if last_event_id is not None and last_event_id.strip().isdigit():
        # Capped: a huge Last-Event-ID would overflow the id column's type in the query.
        return min(int(last_event_id.strip()), MAX_ROW_ID)
    return after or 0


@router.get(
    "/{job_id}/events",
    responses={200: {"content": {"text/event-stream": {}}}, **_ERRORS},
    response_class=StreamingResponse,
)
async def job_events(
    job_id: RowId,
    request: Request,
    settings: SettingsDep,
    _: ReaderDep,
    last_event_id: Annotated[str | None, Header()] = None,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_ROW_ID, description="resume after this event id")
    ] = None,
) -> StreamingResponse:
    """Server-sent events from ``job_events`` in id order (``Last-Event-ID`` resumes).

    The stream ends with an ``end`` event once the job has ended and every event was sent.
    """
    sessions: sessionmaker[Session] = request.app.state.session_factory
    if await run_in_threadpool(_status, sessions, job_id) is None:
        raise not_found("job", job_id)

    async def stream() -> AsyncIterator[str]:
        last = _resume_point(last_event_id, after)
        idle = 0.0
        yield "retry: 2000\n\n"
        while not await request.is_disconnected():
            status, events = await run_in_threadpool(_poll, sessions, job_id, last)
            for event in events:
                yield format_event(event)
                last = event.id
            if len(events) == _EVENT_BATCH:
                continue
            if status is None or status in TERMINAL_STATUSES:
                yield f"event: end\ndata: {json.dumps({'status': status})}\n\n"
                return
            if events:
                idle = 0.0
            elif idle >= _KEEPALIVE_SECONDS:
                yield ": keepalive\n\n"
                idle = 0.0
            await asyncio.sleep(settings.poll_seconds)
            idle += settings.poll_seconds

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
