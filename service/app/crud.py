"""Database reads and writes behind the routes: rows in, response schemas out.

Job state transitions (claim, heartbeat, cancel, finish) live in ``queue``; this module creates
and reads. Functions take an open ``Session`` and commit only when they say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from convtune.db.models import (
    ANONYMOUS_OWNER,
    ArtifactRow,
    JobEventRow,
    JobRow,
    JobStatus,
    ModelRow,
    ModelWorkloadRow,
)
from convtune.db.stats import NO_RECORDS, record_stats
from convtune.service.readmodels import job_progress
from convtune.tuner.events import NOTE_KINDS, EventKind, Queued, parse_event

from .core.errors import ApiError, not_found
from .schemas import JobCreate, JobOut, LayerProgress, ModelOut, ModelSummary, WorkloadOut


def get_model(session: Session, model_id: int) -> ModelRow:
    model = session.get(ModelRow, model_id)
    if model is None:
        raise not_found("model", model_id)
    return model


def find_model_by_sha(session: Session, sha256: str) -> ModelRow | None:
    return session.scalars(select(ModelRow).where(ModelRow.sha256 == sha256)).first()


def list_models(session: Session, *, offset: int = 0, limit: int = 100) -> Sequence[ModelRow]:
    return session.scalars(select(ModelRow).order_by(ModelRow.id).offset(offset).limit(limit)).all()


def _model_workloads(session: Session, model_id: int) -> Sequence[ModelWorkloadRow]:
    return session.scalars(
        select(ModelWorkloadRow)
        .where(ModelWorkloadRow.model_id == model_id)
        .order_by(ModelWorkloadRow.position, ModelWorkloadRow.id)
    ).all()


def model_summary(model: ModelRow) -> ModelSummary:
    return ModelSummary.model_validate(model, from_attributes=True)


def model_out(session: Session, model: ModelRow) -> ModelOut:
    rows = _model_workloads(session, model.id)
    stats = record_stats(session, (r.workload_id for r in rows))
    workloads = []
    for row in rows:
        trials, best, _ = stats.get(row.workload_id or -1, NO_RECORDS)
        workloads.append(
            WorkloadOut(
                position=row.position,
                workload_id=row.workload_id,
                onnx_nodes=row.onnx_nodes,
                op=row.op,
                kind=row.kind,
                description=row.description,
                occurrences=row.occurrences,
                flops=row.flops,
                trials=trials,
                best_gflops=best,
            )
        )
    return ModelOut(**model_summary(model).model_dump(), workloads=workloads)


def get_job(session: Session, job_id: int) -> JobRow:
    job = session.get(JobRow, job_id)
    if job is None:
        raise not_found("job", job_id)
    return job


def find_job_by_key(session: Session, key: str) -> JobRow | None:
    return session.scalars(select(JobRow).where(JobRow.idempotency_key == key)).first()


def _same_request(job: JobRow, model_id: int, options: dict[str, Any]) -> None:
    if job.model_id != model_id or job.options != options:
        raise ApiError(
            409,
            "idempotency_key_reused",
            f"Idempotency-Key was already used by job {job.id} with a different request",
        )


def create_job(
    session: Session,
    model: ModelRow,
    body: JobCreate,
    *,
    target_id: int | None,
    idempotency_key: str | None,
    owner: str = ANONYMOUS_OWNER,
) -> tuple[JobRow, bool]:
    """Queue a job (committed) → ``(job, True)``; a known key → ``(that job, False)``.

    The same key with a different model or options is a 409: a retried request must be identical.
    """
    options = body.model_dump()
    if idempotency_key is not None:
        existing = find_job_by_key(session, idempotency_key)
        if existing is not None:
            _same_request(existing, model.id, options)
            return existing, False
    job = JobRow(
        model_id=model.id,
        target_id=target_id,
        status=JobStatus.QUEUED,
        options=options,
        idempotency_key=idempotency_key,
        attempts=0,
        cancel_requested=False,
        owner=owner,
    )
    session.add(job)
    try:
        session.flush()
        queued = Queued(options=options)
        session.add(JobEventRow(job_id=job.id, kind=queued.kind, payload=queued.as_dict()))
        session.commit()
    except IntegrityError:
        # A concurrent request with the same key won the insert.
        session.rollback()
        if idempotency_key is None:
            raise
        existing = find_job_by_key(session, idempotency_key)
        if existing is None:
            raise
        _same_request(existing, model.id, options)
        return existing, False
    return job, True


def _job_notes(session: Session, job_id: int) -> dict[str, Any]:
    """The job's fallback lines (notice events, in order) and its last ``compared`` payload
    (the check against onnxruntime)."""
    rows = session.execute(
        select(JobEventRow.kind, JobEventRow.payload)
        .where(JobEventRow.job_id == job_id, JobEventRow.kind.in_(NOTE_KINDS))
        .order_by(JobEventRow.id)
    ).all()
    events = [parse_event(kind, payload) for kind, payload in rows]
    notes = [event.notice for event in events if event.notice is not None]
    compared = [event.as_dict() for event in events if event.kind == EventKind.COMPARED]
    return {"notes": notes, "peer_check": compared[-1] if compared else None}


def job_out(session: Session, job: JobRow) -> JobOut:
    """The job with its per-layer progress (:func:`~convtune.service.readmodels.job_progress`,
    which the dashboard shows too); a figure the read model leaves None is 0 here."""
    progress = job_progress(session, job.model_id, job)
    return JobOut(
        id=job.id,
        model_id=job.model_id,
        target_id=job.target_id,
        status=job.status,
        options=job.options,
        worker_id=job.worker_id,
        attempts=job.attempts,
        cancel_requested=job.cancel_requested,
        created_at=job.created_at,
        started_at=job.started_at,
        heartbeat_at=job.heartbeat_at,
        finished_at=job.finished_at,
        error=job.error,
        artifact_id=job.artifact_id,
        trials_done=progress.trials_done,
        trials_budget=progress.trials_budget or 0,
        progress=[
            LayerProgress(
                position=layer.position,
                workload_id=layer.workload_id,
                op=layer.op,
                kind=layer.kind,
                onnx_nodes=layer.onnx_nodes,
                trials=layer.trials,
                trials_this_job=layer.trials_this_job or 0,
                budget=layer.budget or 0,
                best_gflops=layer.best_gflops,
            )
            for layer in progress.layers
        ],
        **_job_notes(session, job.id),
    )


def list_jobs(
    session: Session, *, model_id: int | None = None, limit: int = 100
) -> Sequence[JobRow]:
    query = select(JobRow).order_by(JobRow.id.desc()).limit(limit)
    if model_id is not None:
        query = query.where(JobRow.model_id == model_id)
    return session.scalars(query).all()


def events_after(
    session: Session, job_id: int, after_id: int, limit: int = 500
) -> Sequence[JobEventRow]:
    return session.scalars(
        select(JobEventRow)
        .where(JobEventRow.job_id == job_id, JobEventRow.id > after_id)
        .order_by(JobEventRow.id)
        .limit(limit)
    ).all()


def get_artifact(session: Session, artifact_id: int) -> ArtifactRow:
    artifact = session.get(ArtifactRow, artifact_id)
    if artifact is None:
        raise not_found("artifact", artifact_id)
    return artifact


def resolve_target_id(engine: Engine, text: str | None) -> int:
    """The ``targets`` row of a target spelled as the CLI does (None → this host), created if new.

    Raises ``ConvtuneError`` (→ 400) for a target TVM rejects.
    """
    from convtune.db.records import RecordRepository
    from convtune.tuner.target import make_target

    # The repository owns the target identity (its key) and the get-or-create race handling.
    return RecordRepository(engine, make_target(text)).target_id
