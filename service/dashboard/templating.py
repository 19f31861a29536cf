"""The dashboard's Jinja environment, with its filters: one for every page module."""

from __future__ import annotations

from pathlib import Path

from fastapi.templating import Jinja2Templates

from convtune.tuner.events import EventKind

from .filters import install_filters

templates = Jinja2Templates(directory=Path(__file__).resolve().parent / "templates")
install_filters(templates.env)
# The job page's event stream listens for each kind by name (dashboard.js).
templates.env.globals["event_kinds"] = [kind.value for kind in EventKind]
