"""``/api/fleets`` and the ``/fleets`` page against a real API process, a real TVM RPC tracker and
a real ``convtune rpc-server`` device; a fleet job whose tracker is gone pauses, not fails."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select

from convtune.db.models import JobEventRow, JobRow
from convtune.db.session import make_engine
from tests.models import conv_net, to_bytes
from tests.service.test_models_api import assert_error, upload
from tests.service.test_worker_e2e import wait_for
from tests.tuner.test_fleet_rpc import KEY, Tracker, _kill, _start_tracker, free_port


@pytest.fixture(scope="module")
def loop_tracker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Tracker, str]]:
    tracker = _start_tracker(tmp_path_factory.mktemp("tracker"))
    device = None
    try:
        device, address = tracker.start_device(threads=1)
        yield tracker, address
    finally:
        if device is not None:
            _kill(device)
        _kill(tracker.process)


def test_register_list_and_show_a_fleet(client, loop_tracker):
    tracker, device = loop_tracker
    body = {"name": "api-loop", "tracker": f"127.0.0.1:{tracker.port}", "key": KEY}
    response = client.post("/api/fleets", json=body)
    assert response.status_code == 201, response.text
    created = response.json()
    assert created["peak_device"] == device and created["peak_threads"] == 1
    assert created["peak_gflops_per_core"] > 1.0

    assert_error(client.post("/api/fleets", json=body), 409, "fleet_exists")

    def listed() -> dict | None:
        fleet = {f["name"]: f for f in client.get("/api/fleets").json()}["api-loop"]
        # The device offers itself to the tracker again a moment after the peak's session.
        return fleet if fleet["free"] == 1 else None

    fleet = wait_for(listed, 30, "the device to be free again", poll=0.5)
    assert fleet["devices"] == [device] and fleet["status"] == "ok" and fleet["pending"] == 0

    page = client.get("/fleets")
    assert page.status_code == 200
    assert "api-loop" in page.text and device in page.text


def test_unreachable_tracker_and_bad_address_are_refused(client):
    dead = {"name": "dead", "tracker": f"127.0.0.1:{free_port()}", "key": KEY}
    assert_error(client.post("/api/fleets", json=dead), 503, "fleet_unavailable")
    bad = {"name": "bad", "tracker": "no-port", "key": KEY}
    assert_error(client.post("/api/fleets", json=bad), 422, "invalid_fleet")
    names = [f["name"] for f in client.get("/api/fleets", params={"live": False}).json()]
    assert "dead" not in names and "bad" not in names


@pytest.mark.slow
def test_a_job_on_a_fleet_whose_tracker_is_gone_pauses(service, client, tmp_path):
    # Registered while its tracker ran; the tracker then went away.
    gone = _start_tracker(tmp_path)
    body = {"name": "gone", "tracker": f"127.0.0.1:{gone.port}", "key": KEY, "measure_peak": False}
    assert client.post("/api/fleets", json=body).status_code == 201
    _kill(gone.process)

    model = upload(client, to_bytes(conv_net(seed=321)), "fleet-job.onnx").json()
    response = client.post(
        f"/api/models/{model['id']}/jobs", json={"trials_per_task": 2, "fleet": "gone"}
    )
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    assert response.json()["options"]["fleet"] == "gone"

    worker = service.start_worker()
    engine = make_engine(service.env["CONVTUNE_DATABASE_URL"])
    try:

        def paused() -> list[dict]:
            with engine.connect() as conn:
                return [
                    row.payload
                    for row in conn.execute(
                        select(JobEventRow).where(
                            JobEventRow.job_id == job_id, JobEventRow.kind == "paused"
                        )
                    )
                ]

        events = wait_for(paused, 300, "the job to pause", poll=0.5)
        assert "unreachable" in events[0]["reason"], events
        assert worker.process.poll() is None, worker.log()  # paused, not crashed
        with engine.connect() as conn:
            status = conn.execute(select(JobRow.status).where(JobRow.id == job_id)).scalar()
        assert status in ("queued", "running")  # back in the queue, claimed again later
    finally:
        worker.kill()
        engine.dispose()
