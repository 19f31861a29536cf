"""Job state transitions on a real database (SQLite and PostgreSQL), without processes."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from convtune.db.models import JobEventRow, JobRow, ModelRow, WorkerRow, utcnow
from convtune.db.session import session_factory
from convtune.service.app import queue
from convtune.service.app.core.errors import ApiError


@pytest.fixture
def sessions(db_engine):
    return session_factory(db_engine)


@pytest.fixture
def model_id(sessions) -> int:
    with sessions() as session:
        model = ModelRow(
            sha256="0" * 64,
            name="m",
            size_bytes=1,
            path="",
            input_shapes={},
            inputs=[],
            outputs=[],
        )
        session.add(model)
        session.commit()
        return model.id


def add_jobs(sessions, model_id: int, n: int, owner: str = "anonymous") -> list[int]:
    with sessions() as session:
        jobs = [
            JobRow(model_id=model_id, options={"trials_per_task": 2}, owner=owner) for _ in range(n)
        ]
        session.add_all(jobs)
        session.commit()
        return [job.id for job in jobs]


def job(sessions, job_id: int) -> JobRow:
    with sessions() as session:
        row = session.get(JobRow, job_id)
        assert row is not None
        return row


def kinds(sessions, job_id: int) -> list[str]:
    with sessions() as session:
        return list(
            session.scalars(
                select(JobEventRow.kind)
                .where(JobEventRow.job_id == job_id)
                .order_by(JobEventRow.id)
            )
        )


def make_stale(sessions, job_id: int, seconds: float = 3600) -> None:
    with sessions() as session:
        session.execute(
            update(JobRow)
            .where(JobRow.id == job_id)
            .values(heartbeat_at=utcnow() - timedelta(seconds=seconds))
        )
        session.commit()


def test_concurrent_claimers_get_different_jobs(sessions, model_id):
    ids = add_jobs(sessions, model_id, 4)
    claimed: list[int | None] = []
    lock = threading.Lock()
    start = threading.Barrier(6)

    def claim(i: int) -> None:
        start.wait()
        got = queue.claim_next(sessions, f"w{i}")
        with lock:
            claimed.append(got)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = sorted(j for j in claimed if j is not None)
    assert won == ids  # every job exactly once, two claimers found the queue empty
    assert claimed.count(None) == 2
    for job_id in ids:
        row = job(sessions, job_id)
        assert row.status == "running" and row.worker_id and row.heartbeat_at is not None
        assert kinds(sessions, job_id) == ["claimed"]


def test_heartbeat_only_for_the_owner_and_reports_cancel(sessions, model_id):
    [job_id] = add_jobs(sessions, model_id, 1)
    assert queue.claim_next(sessions, "owner") == job_id
    before = job(sessions, job_id).heartbeat_at
    assert queue.heartbeat(sessions, job_id, "owner") == queue.Beat(True, False)
    assert job(sessions, job_id).heartbeat_at >= before
    assert queue.heartbeat(sessions, job_id, "intruder").alive is False
    with sessions() as session:
        queue.request_cancel(session, job_id)
    assert job(sessions, job_id).status == "running"
    assert queue.heartbeat(sessions, job_id, "owner") == queue.Beat(True, True)


def test_stale_job_is_requeued_then_failed_after_max_attempts(sessions, model_id):
    [job_id] = add_jobs(sessions, model_id, 1)
    assert queue.claim_next(sessions, "w1") == job_id
    # A fresh heartbeat is not stale.
    assert queue.requeue_stale(sessions, stale_after_seconds=60, max_attempts=2) == []
    make_stale(sessions, job_id)
    assert queue.requeue_stale(sessions, stale_after_seconds=60, max_attempts=2) == [job_id]
    row = job(sessions, job_id)
    assert (row.status, row.attempts, row.worker_id) == ("queued", 1, None)
    # The dead worker wakes up: it may no longer touch the job.
    assert queue.heartbeat(sessions, job_id, "w1").alive is False
    assert not queue.finish(sessions, job_id, "w1", "succeeded", artifact_id=None)

    assert queue.claim_next(sessions, "w2") == job_id
    make_stale(sessions, job_id)
    assert queue.requeue_stale(sessions, stale_after_seconds=60, max_attempts=2) == [job_id]
    row = job(sessions, job_id)
    assert (row.status, row.attempts) == ("failed", 2)
    assert "stopped heartbeating 2 times" in row.error
    assert kinds(sessions, job_id) == ["claimed", "requeued", "claimed", "failed"]


def test_stale_job_with_a_cancel_request_is_cancelled(sessions, model_id):
    [job_id] = add_jobs(sessions, model_id, 1)
    queue.claim_next(sessions, "w1")
    with sessions() as session:
        queue.request_cancel(session, job_id)
    make_stale(sessions, job_id)
    queue.requeue_stale(sessions, stale_after_seconds=60, max_attempts=3)
    assert job(sessions, job_id).status == "cancelled"


def test_cancel_queued_now_and_refuse_ended(sessions, model_id):
    [job_id] = add_jobs(sessions, model_id, 1)
    with sessions() as session:
        queue.request_cancel(session, job_id)
    row = job(sessions, job_id)
    assert row.status == "cancelled" and row.finished_at is not None
    assert queue.claim_next(sessions, "w") is None
    with sessions() as session, pytest.raises(ApiError) as err:
        queue.request_cancel(session, job_id)
    assert err.value.status == 409


def test_finish_and_release_by_the_owner(sessions, model_id):
    first, second = add_jobs(sessions, model_id, 2)
    assert queue.claim_next(sessions, "w") == first
    assert queue.finish(sessions, first, "w", "failed", error="boom")
    row = job(sessions, first)
    assert (row.status, row.error) == ("failed", "boom")
    assert queue.claim_next(sessions, "w") == second
    assert queue.release(sessions, second, "w", "shutting down")
    row = job(sessions, second)
    assert (row.status, row.worker_id, row.attempts) == ("queued", None, 0)
    assert kinds(sessions, second) == ["claimed", "released"]


def test_two_clients_jobs_interleave(sessions, model_id):
    """A queues three jobs before B queues two: claims alternate A, B, A, B, A."""
    a = add_jobs(sessions, model_id, 3, owner="client-a")
    b = add_jobs(sessions, model_id, 2, owner="client-b")
    order = []
    while (job_id := queue.claim_next(sessions, "w")) is not None:
        order.append(job_id)
        assert queue.finish(sessions, job_id, "w", "succeeded")
    assert order == [a[0], b[0], a[1], b[1], a[2]]


def test_a_new_client_goes_before_a_busy_one(sessions, model_id):
    busy = add_jobs(sessions, model_id, 3, owner="busy")
    assert queue.claim_next(sessions, "w") == busy[0]
    [newcomer] = add_jobs(sessions, model_id, 1, owner="newcomer")
    assert queue.claim_next(sessions, "w2") == newcomer


def test_worker_rows_heartbeat_and_are_pruned(sessions):
    queue.worker_alive(sessions, "host:1:a", pid=1)
    queue.worker_alive(sessions, "host:1:a", job_id=7)
    queue.worker_alive(sessions, "host:2:b", pid=2)
    with sessions() as session:
        rows = {r.worker_id: r for r in session.scalars(select(WorkerRow))}
    assert set(rows) == {"host:1:a", "host:2:b"}
    assert (rows["host:1:a"].job_id, rows["host:1:a"].host) == (7, "host")
    queue.worker_gone(sessions, "host:1:a")
    assert queue.prune_workers(sessions, 3600) == 0
    with sessions() as session:
        session.execute(update(WorkerRow).values(heartbeat_at=utcnow() - timedelta(seconds=7200)))
        session.commit()
    assert queue.prune_workers(sessions, 3600) == 1
