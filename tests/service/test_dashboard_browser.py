"""The dashboard in headless Chromium against a real API, a real worker and a real tiny tuning job.

The model is uploaded through the page's form, the job page is watched while the worker tunes
(its counters must change with no navigation), the layer page's charts are counted against the
database, and the download button's file is hashed. Screenshots at 1280×800 go to
``docs/screenshots/``. Needs Debian's ``/usr/bin/chromium`` (skips without it, fails under CI).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import func, select

from convtune.db.models import TuningRecordRow
from convtune.db.session import make_engine
from convtune.tuner.events import EventKind
from tests.models import run_onnxruntime, three_conv_cnn, to_bytes
from tests.service.conftest import REPO, Service, database, start_service

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = REPO / "docs" / "screenshots"
VIEWPORT = {"width": 1280, "height": 800}
JOB_TIMEOUT_MS = 600_000
CONVTUNE = Path(sys.executable).with_name("convtune")

if not CHROMIUM.exists():
    reason = f"{CHROMIUM} is missing (apt-get install -y chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason, allow_module_level=True)

from playwright.sync_api import Page, sync_playwright  # noqa: E402 - only with a browser


@pytest.fixture(scope="module")
def dash(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    directory = tmp_path_factory.mktemp("dashboard")
    with database("sqlite", directory) as url:
        running = start_service(directory, url)
        try:
            yield running
        finally:
            running.stop()


@pytest.fixture(scope="module")
def page(dash: Service) -> Iterator[Page]:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        context = browser.new_context(viewport=VIEWPORT, base_url=dash.url, accept_downloads=True)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            yield page
        finally:
            browser.close()
        assert not errors, f"JavaScript errors on the pages: {errors}"


def screenshot(page: Page, name: str, *, full_page: bool = False) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / name, full_page=full_page)


@pytest.fixture(scope="module")
def model(dash: Service, page: Page) -> dict[str, Any]:
    """cnn3 uploaded through the models page's form; the API's view of it."""
    page.goto("/")
    page.set_input_files(
        "#upload input[name=file]",
        {
            "name": "cnn3.onnx",
            "mimeType": "application/octet-stream",
            "buffer": to_bytes(three_conv_cnn()),
        },
    )
    page.click("#upload button[type=submit]")
    page.wait_for_selector("#models tr[data-model-id] >> text=cnn3")
    with dash.client() as client:
        [uploaded] = client.get("/api/models").json()
        return client.get(f"/api/models/{uploaded['id']}").json()


@pytest.fixture(scope="module")
def watched_job(dash: Service, page: Page, model: dict[str, Any]) -> dict[str, Any]:
    """A 2-trials-per-task job queued from the model page's Tune form, watched on its page from
    before the worker starts to its end (bench and profile included)."""
    page.goto("/")
    page.click(f"#models tr[data-model-id='{model['id']}'] a")
    page.wait_for_selector("#tune-form")
    # A value the API refuses comes back as the API's own message, next to the form.
    page.fill("#tune-form input[name=trials_per_task]", "0")
    page.click("#tune-form button[type=submit]")
    page.wait_for_selector("#tune-result.error")
    refused = page.text_content("#tune-result")
    page.fill("#tune-form input[name=trials_per_task]", "2")
    page.fill("#tune-form input[name=threads]", "2")
    page.select_option("#tune-form select[name=layout]", "nchwc")
    assert page.is_checked("#tune-form input[name=algorithms][value=winograd]")
    page.uncheck("#tune-form input[name=algorithms][value=winograd]")
    screenshot(page, "model.png")
    page.click("#tune-form button[type=submit]")
    page.wait_for_url("**/jobs/*")
    job_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    with dash.client() as client:
        queued = client.get(f"/api/jobs/{job_id}").json()
        page.evaluate("window.__sameDocument = true")
        before = page.text_content("#trials-done")
        had_cancel = page.locator("#cancel button").count() == 1
        dash.start_worker()
        page.wait_for_function(
            "document.getElementById('trials-done').textContent !== '0'", timeout=JOB_TIMEOUT_MS
        )
        during = page.text_content("#trials-done")
        status_during = page.get_attribute("body", "data-job-status")
        screenshot(page, "job-running.png")
        page.wait_for_function(
            "document.body.dataset.streamEnded === '1' && !!document.getElementById('download')"
            " && !!document.getElementById('e2e-ratio')",
            timeout=JOB_TIMEOUT_MS,
        )
        final = client.get(f"/api/jobs/{job_id}").json()
        # The refresh that follows the stream's end shows the final numbers.
        page.wait_for_function(
            "([done, status]) => document.getElementById('trials-done').textContent === done"
            " && document.getElementById('job-status').textContent === status",
            arg=[str(final["trials_done"]), final["status"]],
        )
        return {
            "job": final,
            "queued_options": queued["options"],
            "refused": refused,
            "had_cancel": had_cancel,
            "cancel_after": page.locator("#cancel").count(),
            "before": before,
            "during": during,
            "status_during": status_during,
            "same_document": page.evaluate("window.__sameDocument === true"),
            "after": page.text_content("#trials-done"),
            "status_after": page.text_content("#job-status"),
            "best_cells": page.eval_on_selector_all(
                "#layers tr[data-position]",
                "rows => Object.fromEntries(rows.map(r => [r.dataset.position,"
                " r.querySelector('[data-col=best_gflops]').dataset.value]))",
            ),
        }


def test_tune_form_goes_through_the_api(watched_job: dict[str, Any]) -> None:
    assert "trials_per_task" in watched_job["refused"]  # JobCreate's validation message
    options = watched_job["queued_options"]
    assert (options["trials_per_task"], options["threads"], options["layout"]) == (2, 2, "nchwc")
    assert options["algorithms"] == ["direct"]  # Winograd unticked: refused by the job
    assert options["precision"] == "fp32"  # the form's precision select, at its default
    assert watched_job["had_cancel"] and watched_job["cancel_after"] == 0


def test_models_list_shows_the_upload_and_its_ratio(
    page: Page, model: dict[str, Any], watched_job: dict[str, Any]
) -> None:
    page.goto("/")
    row = page.locator(f"#models tr[data-model-id='{model['id']}']")
    cells = row.locator("td").all_text_contents()
    assert cells[1] == "cnn3"
    assert cells[3] == str(len(model["workloads"])) and len(model["workloads"]) >= 4
    # Best latency and time / onnxruntime, from the bench the worker ran after the job.
    assert float(cells[4]) > 0 and float(cells[5]) > 0, cells
    assert cells[6] == f"job {watched_job['job']['id']}: succeeded"
    screenshot(page, "models.png")


def test_every_conv_row_has_its_onnxruntime_time(page: Page, watched_job: dict[str, Any]) -> None:
    page.goto(f"/models/{watched_job['job']['model_id']}")
    rows = page.locator("#layers tr[data-op='Conv']")
    assert rows.count() == 3
    for i in range(rows.count()):
        ort = rows.nth(i).locator("[data-col=ort_ms]").get_attribute("data-value")
        ours = rows.nth(i).locator("[data-col=profile_ms]").get_attribute("data-value")
        gap = rows.nth(i).locator("[data-col=gap]").get_attribute("data-value")
        assert float(ort) > 0 and float(ours) > 0 and float(gap) > 0
        nodes = rows.nth(i).locator("td.nodes").text_content()
        assert nodes in ("conv0", "conv1", "conv2")  # ONNX names, not TVM function names
    # Slowest first: the share column is in descending order.
    shares = [
        float(v)
        for v in page.locator("#layers td[data-col=share]").evaluate_all(
            "cells => cells.map(c => c.dataset.value)"
        )
        if v
    ]
    assert shares == sorted(shares, reverse=True) and sum(shares) == pytest.approx(1.0)
    page.wait_for_selector("#top-layers .bars path")
    assert page.locator("#top-layers .bars path").count() >= 6  # ours and onnxruntime per layer
    assert page.locator("#convergence .scatterlayer .trace").count() >= 4
    assert page.text_content("#e2e-ratio")
    screenshot(page, "model-tuned.png", full_page=True)


def test_job_page_updates_live_without_reload(page: Page, watched_job: dict[str, Any]) -> None:
    job = watched_job["job"]
    assert job["status"] == "succeeded", job["error"]
    assert watched_job["before"] == "0"
    assert watched_job["during"] != "0"
    assert watched_job["same_document"], "the page navigated while the job ran"
    assert watched_job["after"] == str(job["trials_done"]) and job["trials_done"] > 0
    assert watched_job["status_after"] == "succeeded"
    # Per-layer rows were updated in place too: each best GFLOP/s cell matches the API.
    for layer in job["progress"]:
        shown = watched_job["best_cells"][str(layer["position"])]
        if layer["best_gflops"] is None:
            assert shown == ""
        else:
            assert float(shown) == pytest.approx(layer["best_gflops"])
    page.goto(f"/jobs/{job['id']}")
    screenshot(page, "job.png")


def test_the_job_page_listens_for_every_event_kind(page: Page, watched_job: dict[str, Any]) -> None:
    """The stream names each event's kind; a kind the page does not listen for never refreshes
    it (the list was hand-kept in dashboard.js and had fallen 12 kinds behind)."""
    page.goto(f"/jobs/{watched_job['job']['id']}")
    listened = page.evaluate("JSON.parse(document.body.dataset.eventKinds)")
    assert listened == [kind.value for kind in EventKind]


def test_layer_table_sorts_on_click(page: Page, watched_job: dict[str, Any]) -> None:
    page.goto(f"/jobs/{watched_job['job']['id']}")
    header = page.locator("#layers th", has_text="best GFLOP/s")
    header.click()
    header.click()  # second click: descending

    def column() -> list[float]:
        values = page.locator("#layers td[data-col=best_gflops]").evaluate_all(
            "cells => cells.map(c => c.dataset.value)"
        )
        return [float(v) for v in values if v]

    values = column()
    assert len(values) >= 3 and values == sorted(values, reverse=True)


def test_downloads_run_with_convtune_run(
    dash: Service, page: Page, watched_job: dict[str, Any], tmp_path: Path
) -> None:
    job = watched_job["job"]
    page.goto(f"/jobs/{job['id']}")
    shown = page.text_content("#artifact-sha")
    saved = {}
    for selector in ("#download", "#download-manifest", "#job-log"):
        with page.expect_download() as info:
            page.click(selector)
        saved[selector] = tmp_path / info.value.suggested_filename
        info.value.save_as(saved[selector])
    body = saved["#download"].read_bytes()
    with dash.client() as client:
        artifact = client.get(f"/api/artifacts/{job['artifact_id']}").json()
    assert hashlib.sha256(body).hexdigest() == shown == artifact["sha256"]
    assert body[:4] == b"\x7fELF"
    assert saved["#download"].name == f"artifact-{artifact['id']}.so"
    assert saved["#download-manifest"].name == f"artifact-{artifact['id']}.manifest.json"
    # The job's TVM output went to its own log, not to the worker's (server) log.
    assert "meta_schedule" in saved["#job-log"].read_text()
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    (expected,) = run_onnxruntime(three_conv_cnn(), {"x": x})
    result = subprocess.run(
        [str(CONVTUNE), "run", saved["#download"].name, "--input", "x.npy", "--output", "y.npz"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("y: shape [1, 10] float32")
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], expected, rtol=1e-4, atol=1e-4)


def _readme_commands(marker: str) -> list[str]:
    """Lines of the README's shell blocks that contain ``marker``, comments stripped."""
    text = (REPO / "README.md").read_text()
    return [
        line.split("#", 1)[0].strip()
        for line in text.splitlines()
        if marker in line and not line.lstrip().startswith("#")
    ]


def test_readme_download_then_run_as_written(
    dash: Service, watched_job: dict[str, Any], tmp_path: Path
) -> None:
    """The README's curl downloads of artifact 1 and its `convtune run` line, run as written
    (only the host:port and `.venv/bin/` changed)."""
    assert watched_job["job"]["artifact_id"] == 1
    downloads = _readme_commands("curl -OJ")
    [run_line] = _readme_commands("convtune run artifact-1.so")
    assert len(downloads) == 2
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 16, 16), np.float32))
    for line in downloads:
        command = line.replace("http://127.0.0.1:8000", dash.url)
        done = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert {p.name for p in tmp_path.iterdir()} >= {"artifact-1.so", "artifact-1.manifest.json"}
    command = run_line.replace(".venv/bin/convtune", str(CONVTUNE))
    done = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("y: shape [1, 10]")


def _confirmed_in_db(dash: Service, workload_id: int) -> bool:
    engine = make_engine(dash.env["CONVTUNE_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            query = TuningRecordRow.confirmed_query(workload_id)
            return conn.execute(query).first() is not None
    finally:
        engine.dispose()


def _trials_in_db(dash: Service, workload_id: int) -> int:
    engine = make_engine(dash.env["CONVTUNE_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            return conn.scalar(
                select(func.count(TuningRecordRow.id)).where(
                    TuningRecordRow.workload_id == workload_id, TuningRecordRow.trials()
                )
            )
    finally:
        engine.dispose()


def test_layer_page_draws_every_trial(
    dash: Service, page: Page, watched_job: dict[str, Any]
) -> None:
    conv = max(
        (p for p in watched_job["job"]["progress"] if p["op"] == "Conv"),
        key=lambda p: p["best_gflops"] or 0.0,
    )
    wid = conv["workload_id"]
    page.goto(f"/jobs/{watched_job['job']['id']}")
    page.click(f"#layers a[href='/layers/{wid}']")
    page.wait_for_selector("#chart-scatter .scatterlayer path.point")
    trials = _trials_in_db(dash, wid)
    assert trials == conv["trials"] >= 2
    assert page.locator("#chart-scatter .scatterlayer path.point").count() == trials
    assert page.text_content("#trial-count") == str(trials)
    best_points = page.locator("#chart-best-trial .scatterlayer path.point").count()
    assert 1 <= best_points <= trials
    assert page.locator("#chart-best-time .scatterlayer path.point").count() == best_points
    assert page.locator("#chart-roofline .scatterlayer path.point").count() == 1
    decisions = page.text_content("#decisions")
    assert "×" in decisions, decisions  # tile sizes of the best schedule
    assert page.locator("#trials tbody tr").count() == trials
    # The build's record: the confirmed one where a confirmation counts (tuner/search/confirm.py).
    built = page.text_content("#built") or ""
    if _confirmed_in_db(dash, wid):
        assert "confirmed: the median of" in built, built
    else:
        assert "the fastest trial" in built, built
    screenshot(page, "layer.png")


def test_plotly_is_served_from_the_installed_package(dash: Service) -> None:
    import plotly

    shipped = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    with dash.client() as client:
        response = client.get("/vendor/plotly.min.js")
    assert response.status_code == 200
    assert (
        hashlib.sha256(response.content).digest() == hashlib.sha256(shipped.read_bytes()).digest()
    )


def test_worker_log_has_progress_lines_and_no_tvm_output(
    dash: Service, watched_job: dict[str, Any]
) -> None:
    """One line per measured batch in the server's log; MetaSchedule's output in the job's."""
    job = watched_job["job"]
    [worker] = dash.workers
    lines = worker.log().splitlines()
    batches = [line for line in lines if f"job {job['id']}: trials " in line]
    assert len(batches) >= 4 and all("elapsed" in line and "best" in line for line in batches)
    assert not [line for line in lines if "tvm.s_tir" in line or "T.prim_func" in line]
    assert len(lines) < 60, len(lines)
    job_log = (dash.data_dir / "logs" / f"job-{job['id']}.log").read_text()
    assert "meta_schedule" in job_log


def test_layer_without_flops_says_so(page: Page, watched_job: dict[str, Any]) -> None:
    page.goto(f"/models/{watched_job['job']['model_id']}")
    zero = page.locator("#layers tr:has(td[data-value='0.0']) a[href^='/layers/']").first
    zero.click()
    page.wait_for_selector("#chart-best-trial .empty-chart")
    assert "no floating-point work" in page.text_content("#chart-best-trial")
    assert page.locator("#chart-roofline .empty-chart").count() == 1
