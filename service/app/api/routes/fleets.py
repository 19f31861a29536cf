"""``/api/fleets``: register a fleet of RPC measuring devices (its peak measured), list fleets."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from convtune.tuner.errors import ConvtuneError
from convtune.tuner.measure.fleet import Fleet, FleetUnavailable

from ...core.errors import ApiError
from ...fleets import (
    FleetCreate,
    FleetExists,
    FleetOut,
    create_fleet,
    fleet_out,
    list_fleets,
    live_status,
)
from ...schemas import error_responses
from ..deps import ReaderDep, SessionDep, WriterDep

router = APIRouter(prefix="/fleets", tags=["fleets"])

_ERRORS = error_responses(400, 401, 409, 422, 503)


@router.post("", status_code=201, response_model=FleetOut, responses=_ERRORS)
def add_fleet(body: FleetCreate, session: SessionDep, _: WriterDep) -> FleetOut:
    """Register a fleet; its fp32 peak is measured on one of its devices (a few seconds).

    503 when the tracker cannot be reached or has no device of the key; 409 for a taken name.
    """
    try:
        row = create_fleet(session, body)
    except FleetUnavailable as exc:
        raise ApiError(503, "fleet_unavailable", exc.message) from None
    except FleetExists as exc:
        raise ApiError(409, "fleet_exists", exc.message) from None
    except ConvtuneError as exc:
        raise ApiError(422, "invalid_fleet", exc.message) from None
    return fleet_out(row)


@router.get("", response_model=list[FleetOut])
def get_fleets(
    session: SessionDep,
    _: ReaderDep,
    live: Annotated[bool, Query(description="ask each tracker for its devices")] = True,
) -> list[FleetOut]:
    """Every fleet with its peak and, with ``live``, its devices at the tracker now."""
    rows = list_fleets(session)
    return [fleet_out(row, live_status(Fleet.from_row(row)) if live else None) for row in rows]
