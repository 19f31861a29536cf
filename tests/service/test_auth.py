"""Bearer-token protection of write endpoints and downloads (``CONVTUNE_API_TOKEN``)."""

from __future__ import annotations

import stat

import pytest

from tests.models import conv_net, to_bytes
from tests.service.conftest import database, start_service
from tests.service.test_models_api import assert_error, upload

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    directory = tmp_path_factory.mktemp("auth")
    with database("sqlite", directory) as url:
        service = start_service(directory, url, api_token=TOKEN)
        try:
            yield service
        finally:
            service.stop()


def test_writes_and_downloads_need_the_token(secured):
    data = to_bytes(conv_net(seed=301))
    with (
        secured.client() as anonymous,
        secured.client(TOKEN) as authed,
        secured.client("wrong") as wrong,
    ):
        response = upload(anonymous, data)
        assert_error(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"
        assert_error(upload(wrong, data), 401, "unauthorized")
        model = upload(authed, data)
        assert model.status_code == 201
        model_id = model.json()["id"]
        # Reads stay open.
        assert anonymous.get(f"/api/models/{model_id}").status_code == 200
        assert anonymous.get("/healthz").status_code == 200

        jobs = f"/api/models/{model_id}/jobs"
        assert_error(anonymous.post(jobs, json={"trials_per_task": 2}), 401, "unauthorized")
        job = authed.post(jobs, json={"trials_per_task": 2})
        assert job.status_code == 201
        cancel = f"/api/jobs/{job.json()['id']}/cancel"
        assert_error(anonymous.post(cancel), 401, "unauthorized")
        assert authed.post(cancel).json()["status"] == "cancelled"

        assert_error(anonymous.get("/api/artifacts/1/download"), 401, "unauthorized")
        assert_error(authed.get("/api/artifacts/1/download"), 404, "not_found")


def test_auto_token_is_generated_once_and_kept_private(tmp_path):
    with database("sqlite", tmp_path) as url:
        service = start_service(tmp_path, url, api_token="auto")
        try:
            token_file = service.data_dir / "api_token"
            token = token_file.read_text().strip()
            assert len(token) >= 32
            assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
            assert token in service.proc.log()
            with service.client() as anonymous, service.client(token) as authed:
                assert_error(upload(anonymous, b"x"), 401, "unauthorized")
                assert_error(upload(authed, b""), 400, "empty_file")
        finally:
            service.stop()
        restarted = start_service(tmp_path, url, api_token="auto")
        try:
            assert token_file.read_text().strip() == token
            with restarted.client(token) as authed:
                assert_error(upload(authed, b""), 400, "empty_file")
        finally:
            restarted.stop()
