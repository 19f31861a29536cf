"""``/fleets``: the registered fleets, their devices as the tracker sees them now, their peaks.

A page of its own (router added by ``install_dashboard``): each tracker is asked with a 5 s
connect timeout, and an unreachable one shows its reason instead of devices.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from convtune.tuner.measure.fleet import Fleet

from ..app.api.deps import SessionDep
from ..app.fleets import fleet_out, list_fleets, live_status
from .templating import templates

router = APIRouter(include_in_schema=False)


@router.get("/fleets", response_class=HTMLResponse)
def fleets_page(request: Request, session: SessionDep) -> HTMLResponse:
    fleets = [fleet_out(row, live_status(Fleet.from_row(row))) for row in list_fleets(session)]
    return templates.TemplateResponse(request, "fleets.html", {"fleets": fleets})
