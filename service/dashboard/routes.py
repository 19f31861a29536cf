"""HTML pages of the dashboard and the JSON their scripts fetch.

Pages: ``/`` (models), ``/models/{id}`` and ``/jobs/{id}`` (layers), ``/layers/{workload_id}``.
``/jobs/{id}/layers.json`` is what the job page re-reads when the job's event stream reports
progress. Plotly.js is streamed from the installed ``plotly`` package (no copy in the repo).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import plotly
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles

from ..app import crud
from ..app.api.deps import PageNumber, RowId, SessionDep, SettingsDep
from ..app.api.routes.health import service_health
from ..app.core.errors import ApiError
from . import views
from .fleets import router as fleets_router
from .templating import templates

HERE = Path(__file__).resolve().parent
PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
MODELS_PER_PAGE = 50

router = APIRouter(include_in_schema=False)


def _page(request: Request, name: str, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, context)


@router.get("/", response_class=HTMLResponse)
def models_page(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    page: PageNumber = 1,
) -> HTMLResponse:
    offset = (page - 1) * MODELS_PER_PAGE
    # One extra row tells whether a next page exists without a COUNT query.
    models = views.models_overview(session, offset=offset, limit=MODELS_PER_PAGE + 1)
    return _page(
        request,
        "models.html",
        models=models[:MODELS_PER_PAGE],
        page=page,
        has_next=len(models) > MODELS_PER_PAGE,
        auth=settings.auth_enabled,
        health=service_health(session, settings),
    )


@router.get("/models/{model_id}", response_class=HTMLResponse)
def model_page(
    model_id: RowId, request: Request, session: SessionDep, settings: SettingsDep
) -> HTMLResponse:
    model = crud.get_model(session, model_id)
    return _page(
        request,
        "layers.html",
        view=views.layer_page(session, model, None),
        live=False,
        tune=views.tune_form(),
        auth=settings.auth_enabled,
    )


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(
    job_id: RowId, request: Request, session: SessionDep, settings: SettingsDep
) -> HTMLResponse:
    job = crud.get_job(session, job_id)
    view = views.layer_page(session, crud.get_model(session, job.model_id), job)
    return _page(
        request, "layers.html", view=view, live=True, tune=None, auth=settings.auth_enabled
    )


@router.get("/jobs/{job_id}/layers.json")
def job_layers(job_id: RowId, session: SessionDep) -> dict[str, Any]:
    job = crud.get_job(session, job_id)
    return views.layer_page(session, crud.get_model(session, job.model_id), job)


@router.get("/jobs/{job_id}/log")
def job_log(job_id: RowId, session: SessionDep, settings: SettingsDep) -> FileResponse:
    """The job's TVM output (MetaSchedule's logs, the builder's and runner's messages)."""
    from ..worker import job_log_path

    crud.get_job(session, job_id)
    path = job_log_path(settings.data_dir, job_id)
    if not path.is_file():
        raise ApiError(404, "not_found", f"job {job_id} has no log yet")
    return FileResponse(
        path, media_type="text/plain; charset=utf-8", filename=f"job-{job_id}-tvm.log"
    )


@router.get("/layers/{workload_id}", response_class=HTMLResponse)
def layer_page(
    workload_id: RowId,
    request: Request,
    session: SessionDep,
    page: PageNumber = 1,
) -> HTMLResponse:
    return _page(request, "layer.html", view=views.layer_detail(session, workload_id, page=page))


@router.get("/vendor/plotly.min.js")
def plotly_js() -> FileResponse:
    return FileResponse(
        PLOTLY_JS,
        media_type="text/javascript",
        headers={"Cache-Control": "public, max-age=86400"},
    )


def install_dashboard(app: FastAPI, dependencies: Sequence[Any] = ()) -> None:
    """Add the pages (behind ``dependencies``), ``/vendor/plotly.min.js`` and ``/static``."""
    app.include_router(router, dependencies=list(dependencies))
    app.include_router(fleets_router, dependencies=list(dependencies))
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="dashboard-static")
