"""``/api/models``: upload (multipart, streamed), list, show, and queue a tuning job."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from ... import crud
from ...dbbusy import with_retries
from ...limits import check_job, check_job_quota
from ...schemas import JobCreate, JobOut, ModelOut, ModelSummary, error_responses
from ...store import store_upload
from ...upload import stream_upload
from ..deps import (
    MAX_ROW_ID,
    EngineDep,
    ListLimit,
    ReaderDep,
    RowId,
    SessionDep,
    SettingsDep,
    WriterDep,
)

router = APIRouter(prefix="/models", tags=["models"])

_ERRORS = error_responses(400, 401, 403, 404, 409, 413, 415, 422, 429, 503)
_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "input_shapes": {
                            "type": "string",
                            "description": "pins dynamic input dims: 'x=1,3,224,224;y=1,10'",
                        },
                    },
                }
            }
        },
    }
}


@router.post(
    "",
    status_code=201,
    response_model=ModelOut,
    responses={
        200: {"model": ModelOut, "description": "these bytes were uploaded before"},
        **_ERRORS,
    },
    openapi_extra=_UPLOAD_BODY,
)
async def upload_model(
    request: Request, response: Response, settings: SettingsDep, caller: WriterDep
) -> ModelOut:
    """Upload an ONNX model (multipart field ``file``); 201 when new, 200 when already known
    (also when the same bytes are being uploaded concurrently: one extraction serves all).

    The body is streamed to disk and refused with 413 as soon as it passes
    ``CONVTUNE_MAX_UPLOAD_BYTES``. Checking and extracting run in a child process bounded by
    ``CONVTUNE_MAX_EXTRACT_SECONDS`` (422 beyond); the model limits give 422
    ``limit_exceeded``, the client's storage quota 429 ``quota_exceeded``.
    """
    upload = await stream_upload(
        request.headers.get("content-type"),
        request.headers.get("content-length"),
        request.stream(),
        tmp_dir=settings.tmp_dir,
        max_bytes=settings.max_upload_bytes,
    )
    sessions = request.app.state.session_factory
    model_id, created = await store_upload(
        upload,
        owner=caller.client,
        settings=settings,
        sessions=sessions,
        extractor=request.app.state.extractor,
    )
    response.status_code = 201 if created else 200

    def _load() -> ModelOut:
        with sessions() as session:
            return crud.model_out(session, crud.get_model(session, model_id))

    return await run_in_threadpool(with_retries, _load, settings.db_busy_retries)


@router.get("", response_model=list[ModelSummary])
def list_models(
    session: SessionDep,
    _: ReaderDep,
    offset: Annotated[int, Query(ge=0, le=MAX_ROW_ID)] = 0,
    limit: ListLimit = 100,
) -> list[ModelSummary]:
    return [crud.model_summary(m) for m in crud.list_models(session, offset=offset, limit=limit)]


@router.get("/{model_id}", response_model=ModelOut, responses=_ERRORS)
def get_model(model_id: RowId, session: SessionDep, _: ReaderDep) -> ModelOut:
    return crud.model_out(session, crud.get_model(session, model_id))


@router.post("/{model_id}/jobs", status_code=201, response_model=JobOut, responses=_ERRORS)
def create_job(
    model_id: RowId,
    body: JobCreate,
    response: Response,
    session: SessionDep,
    engine: EngineDep,
    settings: SettingsDep,
    caller: WriterDep,
    idempotency_key: Annotated[str | None, Header(max_length=255)] = None,
) -> JobOut:
    """Queue a tuning job; a repeated ``Idempotency-Key`` returns the first job (200).

    Options over the server's maxima are refused with 422 ``limit_exceeded``; a client with
    ``CONVTUNE_MAX_QUEUED_JOBS_PER_CLIENT`` jobs waiting gets 429 ``quota_exceeded``."""
    check_job(body, settings)

    def queue_it() -> tuple[JobOut, bool]:
        session.rollback()
        model = crud.get_model(session, model_id)
        # A replayed request must not depend on the target resolving the same way twice.
        known = crud.find_job_by_key(session, idempotency_key) if idempotency_key else None
        if known is None:
            check_job_quota(session, caller.client, settings)
        target_id = known.target_id if known else crud.resolve_target_id(engine, body.target)
        job, created = crud.create_job(
            session,
            model,
            body,
            target_id=target_id,
            idempotency_key=idempotency_key,
            owner=caller.client,
        )
        return crud.job_out(session, job), created

    job, created = with_retries(queue_it, settings.db_busy_retries)
    response.status_code = 201 if created else 200
    return job
