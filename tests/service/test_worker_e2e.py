"""A real worker process tunes a tiny job end to end, survives a SIGKILL, and the API serves the
artifact. Slow: it compiles and measures real kernels (a few minutes on 2 cores)."""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from sqlalchemy import select

from convtune.db.models import JobEventRow, TuningRecordRow
from convtune.db.session import make_engine
from tests.service.test_jobs_api import read_sse
from tests.service.test_models_api import upload

pytestmark = pytest.mark.slow

TRIALS = 4
JOB_TIMEOUT = 900.0


def two_conv_model(seed: int = 7) -> bytes:
    """x[1,3,8,8] → Conv 3x3 (4 ch) → Relu → Conv 1x1 (6 ch): two tuning tasks, nothing else
    (no channel count divides by 8: NCHW, no layout transform, on AVX2 and AVX-512 hosts alike).

    Built here so that no other test's records cover its workloads.
    """
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((6, 4, 1, 1)).astype(np.float32), "w2")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv_a", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c1"], ["r1"], name="relu_a"),
            helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv_b"),
        ],
        "two_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8, 8])],
        [w1, w2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def wait_for(predicate, timeout: float, what: str, poll: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def job_records(url: str, job_id: int) -> list[tuple[int, int, str]]:
    """(record id, workload id, canonical trace) of every trial of the job."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(TuningRecordRow.id, TuningRecordRow.workload_id, TuningRecordRow.trace)
                .where(TuningRecordRow.job_id == job_id, TuningRecordRow.trials())
                .order_by(TuningRecordRow.id)
            ).all()
    finally:
        engine.dispose()
    return [(rid, wid, json.dumps(trace, sort_keys=True)) for rid, wid, trace in rows]


def event_kinds(url: str, job_id: int) -> list[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return list(
                conn.scalars(
                    select(JobEventRow.kind)
                    .where(JobEventRow.job_id == job_id)
                    .order_by(JobEventRow.id)
                )
            )
    finally:
        engine.dispose()


def assert_resumed_without_loss(url: str, job_id: int, before: list) -> list[str]:
    """A job whose worker was killed after ``before`` was recorded, then finished: no trial of
    ``before`` is gone, no (workload, schedule) pair was measured twice, and both convs of
    ``two_conv_model`` stayed within their shared pool. Returns the job's event kinds."""
    after = job_records(url, job_id)
    assert set(before) <= set(after), "a trial recorded before the kill is gone"
    pairs = Counter((wid, trace) for _, wid, trace in after)
    assert max(pairs.values()) == 1, "a (workload, trace) pair was measured twice"
    per_workload = Counter(wid for _, wid, _ in after)
    assert len(per_workload) == 2 and sum(per_workload.values()) <= 2 * TRIALS
    kinds = event_kinds(url, job_id)
    assert kinds.count("claimed") == 2 and "requeued" in kinds
    return kinds


def test_job_survives_a_killed_worker_and_serves_its_artifact(service, client):
    url = service.env["CONVTUNE_DATABASE_URL"]
    model = upload(client, two_conv_model(), "two_conv.onnx").json()
    assert [w["op"] for w in model["workloads"]] == ["Conv", "Conv"]
    job = client.post(
        f"/api/models/{model['id']}/jobs",
        json={"trials_per_task": TRIALS, "threads": 2, "seed": 1},
        headers={"Idempotency-Key": f"e2e-{model['id']}"},
    ).json()
    job_path = f"/api/jobs/{job['id']}"
    worker_env = {"CONVTUNE_HEARTBEAT_SECONDS": "0.5", "CONVTUNE_STALE_AFTER_SECONDS": "4"}

    first = service.start_worker(**worker_env)
    # Kill once the first task's batch is committed and the second one's is not.
    progress = wait_for(
        lambda: (body := client.get(job_path).json())["trials_done"] >= 1 and body,
        JOB_TIMEOUT,
        f"the first recorded trial (worker log:\n{first.log()[-3000:]})",
    )
    assert progress["status"] == "running", progress
    first.kill()
    before = job_records(url, job["id"])
    assert before, "no trial was committed before the kill"
    assert client.get(job_path).json()["status"] == "running"  # nobody noticed yet

    second = service.start_worker(**worker_env)
    final = wait_for(
        lambda: (
            (body := client.get(job_path).json())["status"] in ("succeeded", "failed", "cancelled")
            and body
        ),
        JOB_TIMEOUT,
        f"the job to end (worker log:\n{second.log()[-3000:]})",
    )
    assert final["status"] == "succeeded", (final["error"], second.log()[-3000:])
    assert final["attempts"] == 1
    # The Conv tasks share a pool of 2 * TRIALS, split by expected gain (tuner/search/driver.py),
    # and
    # a task may stop early: the total is bounded, not each task's count.
    assert 1 <= final["trials_done"] <= final["trials_budget"] == 2 * TRIALS
    assert all(layer["best_gflops"] for layer in final["progress"])

    kinds = assert_resumed_without_loss(url, job["id"], before)
    assert kinds[0] == "queued"
    assert kinds.index("requeued") < len(kinds) - 1 - kinds[::-1].index("claimed")
    assert kinds[-1] == "succeeded" and "done" in kinds and "verified" in kinds

    # The stream replays the whole history and ends by itself.
    streamed = [e["event"] for e in read_sse(client, f"{job_path}/events")]
    assert streamed == [*kinds, "end"]

    artifact = client.get(f"/api/artifacts/{final['artifact_id']}").json()
    assert artifact["verified"] and artifact["model_id"] == model["id"]
    library = client.get(artifact["download_url"])
    assert library.status_code == 200
    digest = hashlib.sha256(library.content).hexdigest()
    assert library.headers["x-content-sha256"] == digest == artifact["sha256"]
    assert library.content[:4] == b"\x7fELF" and len(library.content) == artifact["size_bytes"]
    manifest = client.get(artifact["manifest_url"])
    assert manifest.headers["x-content-sha256"] == hashlib.sha256(manifest.content).hexdigest()
    assert manifest.json()["library"]["sha256"] == digest

    # Same Idempotency-Key after the fact: the finished job, not a new one.
    replay = client.post(
        f"/api/models/{model['id']}/jobs",
        json={"trials_per_task": TRIALS, "threads": 2, "seed": 1},
        headers={"Idempotency-Key": f"e2e-{model['id']}"},
    )
    assert replay.status_code == 200 and replay.json()["id"] == job["id"]
