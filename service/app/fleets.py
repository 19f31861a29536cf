"""Fleets in the database and their live state at the tracker; shared by the CLI, API and dashboard.

TVM is imported only where the tracker or a device is asked (``tuner/measure/rpc.py``): listing
fleets from
the database needs none.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from convtune.db.models import FleetRow
from convtune.tuner.errors import ConvtuneError
from convtune.tuner.measure.fleet import Fleet, FleetPeak, FleetUnavailable, parse_tracker


class FleetExists(ConvtuneError):
    """The name is taken (the API answers 409)."""


class FleetCreate(BaseModel):
    """A fleet to register; its peak is measured on one of its devices unless ``measure_peak``
    is false."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    tracker: str = Field(description="HOST:PORT of the TVM RPC tracker")
    key: str = Field(min_length=1, max_length=255, description="the devices' RPC key")
    target: str | None = Field(default=None, description="e.g. 'llvm -mcpu=znver4 -num-cores=2'")
    measure_peak: bool = True


class FleetOut(BaseModel):
    id: int
    name: str
    tracker: str
    key: str
    target: str | None
    peak_gflops_per_core: float | None
    peak_gflops_all: float | None
    peak_threads: int | None
    peak_device: str | None
    peak_measured_at: datetime | None
    devices: list[str] | None = Field(
        default=None, description="devices registered at the tracker now (None: not asked)"
    )
    free: int | None = Field(default=None, description="devices free now")
    pending: int | None = Field(default=None, description="requests waiting for a device")
    status: str = Field(default="", description="'ok', or why the tracker could not be asked")


def fleet_out(row: FleetRow, live: dict[str, Any] | None = None) -> FleetOut:
    return FleetOut(
        id=row.id,
        name=row.name,
        tracker=f"{row.tracker_host}:{row.tracker_port}",
        key=row.key,
        target=row.target,
        peak_gflops_per_core=row.peak_gflops_per_core,
        peak_gflops_all=row.peak_gflops_all,
        peak_threads=row.peak_threads,
        peak_device=row.peak_device,
        peak_measured_at=row.peak_measured_at,
        **(live or {}),
    )


def live_status(fleet: Fleet) -> dict[str, Any]:
    """The tracker's view of the fleet: devices of its key, free ones, waiting requests."""
    from convtune.tuner.measure.rpc import tracker_summary

    try:
        summary = tracker_summary(fleet.tracker_host, fleet.tracker_port)
    except FleetUnavailable as exc:
        return {"status": exc.message}
    queue = summary["queue_info"].get(fleet.key, {})
    devices = sorted(
        f"{server['addr'][0]}:{server['addr'][1]}"
        for server in summary["server_info"]
        if server.get("key") == f"server:{fleet.key}"
    )
    return {
        "devices": devices,
        "free": int(queue.get("free", 0)),
        "pending": int(queue.get("pending", 0)),
        "status": "ok",
    }


def list_fleets(session: Session) -> list[FleetRow]:
    return list(session.scalars(select(FleetRow).order_by(FleetRow.name)))


def create_fleet(session: Session, body: FleetCreate) -> FleetRow:
    """Register the fleet (committed), measuring its peak first if asked.

    ``ConvtuneError`` for a bad address or target or a taken name; ``FleetUnavailable`` when
    the peak cannot be measured (tracker down, no device).
    """
    host, port = parse_tracker(body.tracker)
    if body.target is not None:
        from convtune.tuner.target import make_target

        make_target(body.target)  # refuse a target TVM cannot build for, before anything runs
    if session.scalars(select(FleetRow.id).where(FleetRow.name == body.name)).first():
        raise FleetExists(f"a fleet named {body.name!r} exists already")
    fleet = Fleet(body.name, host, port, body.key, body.target)
    peak: FleetPeak | None = None
    if body.measure_peak:
        from convtune.tuner.measure.on_fleet import measure_fleet_peak

        peak = measure_fleet_peak(fleet)
    row = FleetRow(name=fleet.name, tracker_host=host, tracker_port=port, key=fleet.key)
    row.target = fleet.target
    if peak is not None:
        row.peak_gflops_per_core = peak.gflops_per_core
        row.peak_gflops_all = peak.gflops_all
        row.peak_threads = peak.threads
        row.peak_device = peak.device
        row.peak_measured_at = peak.measured_at
    session.add(row)
    session.commit()
    return row
