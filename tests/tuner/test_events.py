"""Job events are typed in one module (tuner/events.py): every kind's payload round-trips through
the dict stored in ``job_events``, and no other module spells a kind as a string."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from convtune.tuner.events import (
    EVENT_TYPES,
    Cancelled,
    Event,
    EventKind,
    SpaceDropped,
    UnknownEvent,
    job_ended,
    parse_event,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tuner", "service", "db", "schedules")
EVENTS_MODULE = ROOT / "tuner" / "events.py"


def _sample(annotation: str) -> Any:
    """A value of a payload field's (string) annotation; not None where None is allowed."""
    kind = annotation.split("|")[0].strip()
    if kind.startswith("list[dict"):
        return [{"task": "t0", "trials": 3}]
    if kind.startswith("list"):
        return ["t0"]
    if kind.startswith("dict"):
        return {"fleet": "f", "threads": 2}
    return {"int": 3, "float": 1.25, "bool": True, "str": "a line"}[kind]


def _event(cls: type[Event]) -> Event:
    return cls(**{f.name: _sample(str(f.type)) for f in dataclasses.fields(cls)})


def test_every_kind_has_a_payload_class() -> None:
    assert set(EVENT_TYPES) == set(EventKind)
    assert all(cls.KIND is kind for kind, cls in EVENT_TYPES.items())


@pytest.mark.parametrize("kind", list(EventKind))
def test_every_payload_round_trips_through_its_stored_dict(kind: EventKind) -> None:
    event = _event(EVENT_TYPES[kind])
    stored = event.as_dict()
    assert event.kind == kind and type(event.kind) is EventKind
    parsed = parse_event(str(kind), stored)
    assert parsed == event and parsed.as_dict() == stored
    # A field that may be None round-trips as None (or, when optional, as absent).
    nones = {f.name: None for f in dataclasses.fields(event) if "None" in str(f.type)}
    if nones:
        empty = dataclasses.replace(event, **nones)
        assert parse_event(kind, empty.as_dict()) == empty


def test_payload_dicts_keep_their_stored_keys() -> None:
    assert Cancelled(while_="queued").as_dict() == {"while": "queued"}
    requeue = {"worker_id": "w", "attempts": 3, "error": "gave up"}
    assert job_ended("failed", requeue).as_dict() == requeue
    assert job_ended(EventKind.SUCCEEDED, {}).as_dict() == {}
    dropped = {"space": "s", "task": "t", "task_index": 1, "reason": "r", "message": "m"}
    assert SpaceDropped(**dropped).as_dict() == dropped


def test_phases_and_notices_are_said_by_the_kinds() -> None:
    phases = {k for k in EventKind if k.is_phase}
    assert phases == {"search_planned", "confirmed", "build_started", "verified"}
    notices = {k for k in EventKind if k.is_notice}
    assert notices == {"layout_fallback", "space_dropped", "search_fallback", "build_fallback"}
    for kind in EventKind:
        event = _event(EVENT_TYPES[kind])
        assert event.is_phase == kind.is_phase
        assert (event.notice is not None) == kind.is_notice
    assert _event(EVENT_TYPES[EventKind.BUILD_FALLBACK]).notice == "a line"


def test_rows_of_unknown_kinds_or_old_payloads_parse_as_stored() -> None:
    future = parse_event("from_a_later_version", {"x": 1})
    assert isinstance(future, UnknownEvent) and future.kind == "from_a_later_version"
    assert future.as_dict() == {"x": 1} and future.notice is None and not future.is_phase
    # An old notice row with only its message still says its line.
    old = parse_event("space_dropped", {"message": "space s dropped for task t: boom"})
    assert isinstance(old, UnknownEvent) and old.notice == "space s dropped for task t: boom"
    assert parse_event("trial_batch", None).as_dict() == {}
    # Keys a payload does not know are dropped; the rest parse.
    done = parse_event("done", {"artifact_id": 4, "so_path": "/a.so", "later": True})
    assert done.as_dict() == {"artifact_id": 4, "so_path": "/a.so"}


# --- no kind spelled as a string outside tuner/events.py -----------------------------------

KIND_VALUES = frozenset(k.value for k in EventKind)
#: Calls whose positional string arguments are event kinds (sinks, emitters, the recorders).
EVENT_CALLS = frozenset(
    {"emit", "on_event", "sink", "append_event", "record_event", "parse_event", "job_ended"}
)


def _is_kind(node: ast.expr) -> bool:
    """``kind``, ``event_kind``, ``row.kind``, ``JobEventRow.kind``…"""
    if isinstance(node, ast.Name):
        return node.id == "kind" or node.id.endswith("_kind")
    return isinstance(node, ast.Attribute) and node.attr == "kind"


def _literals(node: ast.expr) -> list[ast.Constant]:
    """String constants of ``node``, inside tuples, lists, sets and starred items too."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [c for item in node.elts for c in _literals(item)]
    if isinstance(node, ast.Starred):
        return _literals(node.value)
    return []


def _call_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def stray_kind_literals(source: str) -> list[tuple[int, str]]:
    """(line, value) of each event-kind string used where an event kind goes: compared with a
    kind, as a sink's or recorder's argument, as a ``kind=`` keyword, assigned to ``kind``, or in
    ``<kind column>.in_(…)``. The same words as job statuses (``job.status == "failed"``) or
    dict keys are not event positions."""
    found: list[ast.Constant] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_is_kind(o) for o in operands):
                found += [c for o in operands for c in _literals(o)]
        elif isinstance(node, ast.Call):
            name = _call_name(node)
            if name in EVENT_CALLS:
                found += [c for a in node.args for c in _literals(a)]
            if name == "in_" and isinstance(node.func, ast.Attribute) and _is_kind(node.func.value):
                found += [c for a in node.args for c in _literals(a)]
            found += [c for k in node.keywords if k.arg == "kind" for c in _literals(k.value)]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None and any(_is_kind(t) for t in targets):
                found += _literals(node.value)
    return sorted((c.lineno, c.value) for c in found if c.value in KIND_VALUES)


def test_the_scan_flags_a_stray_kind_literal_and_not_a_job_status() -> None:
    stray = """
def on_event(kind, payload):
    if kind == "trial_batch":
        pass
    if event.kind in ("search_planned", "verified"):
        pass
emit("build_fallback", {"message": "m"})
queue.record_event(sessions, job_id, "paused", {})
session.add(JobEventRow(job_id=1, kind="queued", payload={}))
select(JobEventRow.payload).where(JobEventRow.kind.in_((*NOTICES, "compared")))
kind = values["status"] = "requeued"
"""
    assert stray_kind_literals(stray) == [
        (3, "trial_batch"), (5, "search_planned"), (5, "verified"), (7, "build_fallback"),
        (8, "paused"), (9, "queued"), (10, "compared"), (11, "requeued"),
    ]  # fmt: skip
    # The same words as job statuses, manifest keys or other kinds are not event kinds.
    fine = """
if job.status in ("queued", "running") or JobRow.status == "failed":
    pass
queue.finish(sessions, job_id, "w", "succeeded")
manifest = {"verified": True, "build_fallback": None, "confirmed": False}
if task.kind == "conv" or row["kind"] == "other":
    pass
emit(Done(artifact_id=1, so_path="/a.so"))
"""
    assert stray_kind_literals(fine) == []


def test_no_event_kind_is_spelled_as_a_string_outside_the_events_module() -> None:
    strays = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == EVENTS_MODULE or ".venv" in path.parts:
                continue
            for line, value in stray_kind_literals(path.read_text()):
                strays.append(f"{path.relative_to(ROOT)}:{line}: {value!r}")
    assert not strays, "use convtune.tuner.events instead:\n" + "\n".join(strays)
