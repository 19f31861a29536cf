"""``/api/jobs`` against a real API process (no worker): queueing, idempotency, cancel, SSE."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.models import conv_net, to_bytes
from tests.service.test_models_api import assert_error, upload


@pytest.fixture(scope="module")
def model(service) -> dict:
    with service.client() as http:
        response = upload(http, to_bytes(conv_net(seed=201)), "jobs.onnx")
        assert response.status_code in (200, 201), response.text
        return response.json()


def read_sse(client: httpx.Client, path: str, **headers: str) -> list[dict]:
    """Every event of a stream that the server ends by itself."""
    events, current = [], {}
    with client.stream("GET", path, headers=headers, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if not line:
                if "event" in current:
                    events.append(current)
                current = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(": ")
                current[key] = value
    return events


def test_queue_a_job_with_per_layer_progress(client, model):
    response = client.post(f"/api/models/{model['id']}/jobs", json={"trials_per_task": 3})
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "queued" and job["model_id"] == model["id"]
    assert job["options"]["trials_per_task"] == 3 and job["target_id"] is not None
    [layer] = job["progress"]
    assert (layer["op"], layer["budget"], layer["trials"]) == ("Conv", 3, 0)
    assert layer["onnx_nodes"] == ["conv0"]
    assert (job["trials_done"], job["trials_budget"]) == (0, 3)
    assert client.get(f"/api/jobs/{job['id']}").json() == job
    assert job["id"] in [
        j["id"] for j in client.get("/api/jobs", params={"model_id": model["id"]}).json()
    ]


def test_idempotency_key_returns_the_same_job(client, model):
    path = f"/api/models/{model['id']}/jobs"
    headers = {"Idempotency-Key": f"key-{model['id']}-a"}
    first = client.post(path, json={"trials_per_task": 2}, headers=headers)
    again = client.post(path, json={"trials_per_task": 2}, headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert_error(
        client.post(path, json={"trials_per_task": 5}, headers=headers),
        409,
        "idempotency_key_reused",
    )
    other = client.post(path, json={"trials_per_task": 2}, headers={"Idempotency-Key": "other"})
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]


def test_job_requests_are_validated(client, model):
    path = f"/api/models/{model['id']}/jobs"
    assert_error(client.post(path, json={"trials_per_task": 0}), 422, "validation_error")
    assert_error(client.post(path, json={"trails_per_task": 2}), 422, "validation_error")
    assert_error(client.post(path, json={"target": "cuda"}), 400, "bad_request")
    assert_error(client.post(path, json={"target": "llvm -mcpu=nonsense9"}), 400, "bad_request")
    assert_error(client.post("/api/models/999999/jobs", json={}), 404, "not_found")


def test_explicit_target_is_resolved(client, model):
    response = client.post(
        f"/api/models/{model['id']}/jobs",
        json={"trials_per_task": 2, "target": "llvm -mcpu=znver4 -num-cores=2", "threads": 1},
    )
    assert response.status_code == 201, response.text
    assert response.json()["target_id"] is not None


def test_cancel_a_queued_job_and_stream_its_events(client, model):
    job = client.post(f"/api/models/{model['id']}/jobs", json={"trials_per_task": 2}).json()
    cancelled = client.post(f"/api/jobs/{job['id']}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["finished_at"] is not None
    assert_error(client.post(f"/api/jobs/{job['id']}/cancel"), 409, "job_finished")

    events = read_sse(client, f"/api/jobs/{job['id']}/events")
    assert [e["event"] for e in events] == ["queued", "cancelled", "end"]
    first, second, end = events
    assert json.loads(first["data"])["payload"]["options"]["trials_per_task"] == 2
    assert int(second["id"]) > int(first["id"])
    assert json.loads(end["data"]) == {"status": "cancelled"}

    resumed = read_sse(client, f"/api/jobs/{job['id']}/events", **{"Last-Event-ID": first["id"]})
    assert [e["event"] for e in resumed] == ["cancelled", "end"]
    by_query = read_sse(client, f"/api/jobs/{job['id']}/events?after={second['id']}")
    assert [e["event"] for e in by_query] == ["end"]


def test_events_of_an_unknown_job(client):
    assert_error(client.get("/api/jobs/999999/events"), 404, "not_found")


def test_layer_budgets_follow_the_search_plan(service, client, model):
    """Once the search has planned, a layer's budget is what the plan allocated to it (the pool
    is split by expected gain), in the API and on the dashboard; a layer the plan left out had
    all its trials already."""
    from sqlalchemy.orm import Session

    from convtune.db.models import JobEventRow
    from convtune.db.session import make_engine

    job = client.post(f"/api/models/{model['id']}/jobs", json={"trials_per_task": 3}).json()
    [layer] = job["progress"]
    assert layer["budget"] == 3
    engine = make_engine(service.env["CONVTUNE_DATABASE_URL"])
    allocation = [{"task_index": layer["position"], "budget": 11, "trials": 11, "recorded": 0}]
    with Session(engine) as session:
        session.add(
            JobEventRow(job_id=job["id"], kind="search_planned", payload={"allocation": allocation})
        )
        session.commit()
    planned = client.get(f"/api/jobs/{job['id']}").json()
    assert planned["progress"][0]["budget"] == 11 and planned["trials_budget"] == 11
    view = client.get(f"/jobs/{job['id']}/layers.json").json()
    assert [r["budget"] for r in view["rows"] if r["position"] == layer["position"]] == [11]
    assert view["trials_budget"] == 11
    # A later plan (a resumed job) that has nothing left for the layer: its budget is its trials.
    with Session(engine) as session:
        session.add(
            JobEventRow(job_id=job["id"], kind="search_planned", payload={"allocation": []})
        )
        session.commit()
    replanned = client.get(f"/api/jobs/{job['id']}").json()
    assert replanned["progress"][0]["budget"] == replanned["progress"][0]["trials"] == 0
    engine.dispose()
