"""Bearer-token protection (``CONVTUNE_API_TOKEN``): writes, downloads and, unless
``CONVTUNE_PUBLIC_READ``, every read, the event stream and the dashboard; read-only tokens."""

from __future__ import annotations

import stat

import pytest

from tests.models import conv_net, to_bytes
from tests.service.conftest import database, start_service
from tests.service.test_models_api import assert_error, upload

TOKEN = "s3cret-token"
READER = "read-only-token"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    directory = tmp_path_factory.mktemp("auth")
    with database("sqlite", directory) as url:
        service = start_service(directory, url, api_token=TOKEN, read_tokens=READER)
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


READS = [
    "/api/models",
    "/api/models/1",
    "/api/jobs",
    "/api/jobs/1",
    "/api/jobs/1/events",
    "/api/artifacts/1",
    "/api/artifacts/1/download?file=manifest",
]


@pytest.mark.parametrize("path", READS)
def test_every_read_needs_a_token(secured, path):
    with secured.client() as anonymous, secured.client("wrong") as wrong:
        assert_error(anonymous.get(path), 401, "unauthorized")
        assert_error(wrong.get(path), 401, "unauthorized")
    with secured.client(READER) as reader:
        assert reader.get(path).status_code in (200, 404)


def test_read_only_token_cannot_write(secured):
    with secured.client(READER) as reader, secured.client(TOKEN) as writer:
        data = to_bytes(conv_net(seed=302))
        assert_error(upload(reader, data), 403, "read_only_token")
        model_id = upload(writer, data).json()["id"]
        assert reader.get(f"/api/models/{model_id}").json()["id"] == model_id
        jobs = f"/api/models/{model_id}/jobs"
        assert_error(reader.post(jobs, json={"trials_per_task": 2}), 403, "read_only_token")


def test_dashboard_needs_the_token_once_then_a_cookie(secured):
    with secured.client(follow_redirects=False) as browser:
        page = browser.get("/")
        assert page.status_code == 303 and page.headers["location"].startswith("/login")
        assert "API token" in browser.get("/login").text
        assert_error(browser.get("/?token=wrong"), 401, "unauthorized")
        assert "convtune_token" not in browser.cookies
        # ?token= once: stored in an HttpOnly cookie, and the URL loses it.
        moved = browser.get("/?token=" + READER + "&page=1")
        assert moved.status_code == 303 and moved.headers["location"] == "/?page=1"
        assert "httponly" in moved.headers["set-cookie"].lower()
        assert browser.get("/").status_code == 200
        assert browser.get("/api/models").status_code == 200  # the event stream's reads too
        # The cookie never writes.
        assert_error(upload(browser, b"x"), 401, "unauthorized")
    with secured.client(follow_redirects=False) as browser:
        wrong = browser.post("/login", data={"token": "nope", "next": "/"})
        assert wrong.status_code == 401
        form = browser.post("/login", data={"token": TOKEN, "next": "//evil.example/"})
        assert form.status_code == 303 and form.headers["location"] == "/"
        assert browser.get("/").status_code == 200


def test_public_read_opens_reads_only(tmp_path):
    with database("sqlite", tmp_path) as url:
        service = start_service(tmp_path, url, api_token=TOKEN, public_read="true")
        try:
            with service.client() as anonymous:
                assert anonymous.get("/api/models").status_code == 200
                assert anonymous.get("/", follow_redirects=False).status_code == 200
                assert_error(upload(anonymous, b"x"), 401, "unauthorized")
                assert_error(anonymous.get("/api/artifacts/1/download"), 401, "unauthorized")
        finally:
            service.stop()


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
