"""Fleets: the machines a job measures on, reached through one TVM RPC tracker key.

TVM-free (the CLI's ``--help`` and the API read it): the RPC side lives in ``rpc.py``,
``timers.py`` and
``runner.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from convtune.tuner.errors import ConvtuneError

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from convtune.db.models import FleetRow


class FleetUnavailable(ConvtuneError):
    """The fleet's tracker cannot be reached or has no device of the key: the job pauses."""


@dataclass(frozen=True)
class Fleet:
    """Where to measure: devices registered under ``key`` at the tracker ``host:port``."""

    name: str
    tracker_host: str
    tracker_port: int
    key: str
    target: str | None = None

    @property
    def tracker(self) -> str:
        return f"{self.tracker_host}:{self.tracker_port}"

    @classmethod
    def from_row(cls, row: FleetRow) -> Fleet:
        return cls(row.name, row.tracker_host, row.tracker_port, row.key, row.target)


def parse_tracker(text: str) -> tuple[str, int]:
    """``"HOST:PORT"`` as ``(host, port)``; a ``ConvtuneError`` otherwise."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConvtuneError(f"tracker address {text!r} must look like HOST:PORT")
    return host, int(port)


def find_fleet(engine: Engine, name: str) -> Fleet:
    """The registered fleet ``name``; a ``ConvtuneError`` naming the known ones otherwise."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from convtune.db.models import FleetRow

    with Session(engine) as session:
        row = session.scalars(select(FleetRow).where(FleetRow.name == name)).first()
        if row is not None:
            return Fleet.from_row(row)
        known = ", ".join(session.scalars(select(FleetRow.name).order_by(FleetRow.name))) or "none"
    raise ConvtuneError(f"no fleet named {name!r} (registered: {known}); see `convtune fleets add`")


@dataclass(frozen=True)
class FleetPeak:
    """A fleet's fp32 peak as measured on one of its devices."""

    gflops_per_core: float
    gflops_all: float
    threads: int
    device: str
    measured_at: datetime
