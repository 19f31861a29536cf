"""``serve`` supervises its workers: a worker killed with SIGKILL is replaced, its job is
requeued and finishes with every trial kept and none measured twice; a job that reaches the
wall-clock cap stops searching and is built from what it measured. Slow: real tuning."""

from __future__ import annotations

import time

import psutil
import pytest

from tests.service.conftest import database, start_service
from tests.service.test_models_api import assert_error, upload
from tests.service.test_serve import worker_children
from tests.service.test_worker_e2e import (
    JOB_TIMEOUT,
    TRIALS,
    assert_resumed_without_loss,
    event_kinds,
    job_records,
    two_conv_model,
    wait_for,
)

pytestmark = pytest.mark.slow

FAST_HEARTBEAT = {"heartbeat_seconds": "0.5", "stale_after_seconds": "4"}


def ended(client, path: str):
    body = client.get(path).json()
    return body if body["status"] in ("succeeded", "failed", "cancelled") else None


def test_killed_worker_is_replaced_and_its_job_finishes(tmp_path):
    # SQLite only: test_worker_e2e already resumes a killed worker's job on both backends; what
    # is new here is serve's supervisor, which does not touch the database.
    with database("sqlite", tmp_path) as url:
        service = start_service(tmp_path, url, workers="1", **FAST_HEARTBEAT)
        try:
            api = psutil.Process(service.proc.process.pid)
            with service.client() as client:
                health = client.get("/healthz").json()
                assert health["workers_alive"] == 1
                model = upload(client, two_conv_model(seed=11), "two_conv.onnx").json()
                job = client.post(
                    f"/api/models/{model['id']}/jobs",
                    json={"trials_per_task": TRIALS, "threads": 2, "seed": 3},
                ).json()
                path = f"/api/jobs/{job['id']}"
                wait_for(
                    lambda: client.get(path).json()["trials_done"] >= 1,
                    JOB_TIMEOUT,
                    f"the first trial (log:\n{service.proc.log()[-3000:]})",
                )
                [first] = worker_children(api)
                first.kill()  # SIGKILL: no requeue, no goodbye
                first.wait(10)
                before = job_records(url, job["id"])
                assert before, "no trial was committed before the kill"

                replaced = wait_for(
                    lambda: [w for w in worker_children(api) if w.pid != first.pid],
                    30,
                    "a new worker",
                )
                assert len(replaced) == 1
                final = wait_for(lambda: ended(client, path), JOB_TIMEOUT, "the job to end")
                assert final["status"] == "succeeded", (final["error"], service.proc.log()[-3000:])
                assert final["attempts"] == 1
                # The Conv tasks share a pool of 2 * TRIALS split by gain (tuner/search/driver.py);
                # a task may stop early: the total is bounded, not each count.
                assert 1 <= final["trials_done"] <= final["trials_budget"] == 2 * TRIALS
                assert client.get("/healthz").json()["workers_alive"] >= 1
            assert "restarting in" in service.proc.log()
            kinds = assert_resumed_without_loss(url, job["id"], before)
            assert kinds[-1] == "succeeded"
        finally:
            service.stop()


def test_job_at_the_wall_clock_cap_is_built_from_what_it_measured(tmp_path):
    with database("sqlite", tmp_path) as url:
        # 0.2 min: far below what 2 × 64 trials take here.
        service = start_service(tmp_path, url, workers="1", max_job_minutes="0.2")
        try:
            with service.client() as client:
                model = upload(client, two_conv_model(seed=12), "capped.onnx").json()
                job = client.post(
                    f"/api/models/{model['id']}/jobs", json={"trials_per_task": 64, "threads": 2}
                ).json()
                path = f"/api/jobs/{job['id']}"
                started = time.monotonic()
                final = wait_for(lambda: ended(client, path), JOB_TIMEOUT, "the job to end")
                assert final["status"] == "succeeded", (final["error"], service.proc.log()[-3000:])
                # What was measured before the cap (possibly nothing on a busy machine).
                assert final["trials_done"] < final["trials_budget"] == 128
                assert final["artifact_id"] is not None
                assert time.monotonic() - started < JOB_TIMEOUT
                assert "time_cap" in event_kinds(url, job["id"])
                # Over the server's search budget: refused at the door instead.
                assert_error(
                    client.post(f"/api/models/{model['id']}/jobs", json={"budget_minutes": 1e6}),
                    422,
                    "limit_exceeded",
                )
        finally:
            service.stop()
