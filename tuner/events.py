"""What a tuning job says as it runs: one typed event per step, in one place.

The engine (``tuner/pipeline.py``, ``tuner/search/``) emits events to an :data:`EventSink`;
the CLI's progress view, the worker's log and ``job_events`` rows read them. Each kind is an
:class:`EventKind` (its string value is what the database stores and the API serves) with a
frozen payload class whose :meth:`Event.as_dict` is the row's ``payload``. Rows read back are
parsed once, by :func:`parse_event`, which tolerates kinds and payloads it does not know.

What consumers need to tell events apart is said here, on the kinds: :attr:`EventKind.is_phase`
(a job moves to its next phase) and :attr:`Event.notice` (the one line a fallback says).

Bottom layer: the standard library only (the CLI's ``--help`` and the API import it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar


class EventKind(StrEnum):
    """Every kind of job event; the values are stored in ``job_events.kind``: never change one."""

    # The job's life in the queue (service/app/queue.py, service/app/crud.py, service/worker.py).
    QUEUED = "queued"
    CLAIMED = "claimed"
    REQUEUED = "requeued"
    RELEASED = "released"
    PAUSED = "paused"
    CANCEL_REQUESTED = "cancel_requested"
    TIME_CAP = "time_cap"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # The engine (tuner/pipeline.py, tuner/search/).
    EXTRACTED = "extracted"
    LAYOUT_FALLBACK = "layout_fallback"
    SEARCH_PLANNED = "search_planned"
    SPACE_DROPPED = "space_dropped"
    COST_MODEL_WARM_START = "cost_model_warm_start"
    TRIAL_BATCH = "trial_batch"
    TASK_STOPPED = "task_stopped"
    SEARCH_FALLBACK = "search_fallback"
    COST_MODEL_SAVED = "cost_model_saved"
    CONFIRMED = "confirmed"
    BUILD_STARTED = "build_started"
    BUILD_FALLBACK = "build_fallback"
    VERIFIED = "verified"
    COMPARED = "compared"
    DONE = "done"
    # The worker's bench/profile of the new artifact.
    MEASURE_STARTED = "measure_started"
    MEASURE_FAILED = "measure_failed"
    MEASURED = "measured"

    @property
    def is_phase(self) -> bool:
        """The job moves to its next phase: the CLI and the worker log a line for each."""
        return self in _PHASES

    @property
    def is_notice(self) -> bool:
        """The payload's one-line ``message`` says where the job fell back at the smallest scope
        (a space dropped for one task, a pass in the generic space, a build without Winograd or
        records, a model compiled NCHW): the CLI, the worker and the API show each as a note."""
        return self in _NOTICES


_PHASES = frozenset(
    {
        EventKind.SEARCH_PLANNED,
        EventKind.CONFIRMED,
        EventKind.BUILD_STARTED,
        EventKind.VERIFIED,
    }
)
_NOTICES = frozenset(
    {
        EventKind.LAYOUT_FALLBACK,
        EventKind.SPACE_DROPPED,
        EventKind.SEARCH_FALLBACK,
        EventKind.BUILD_FALLBACK,
    }
)
#: Kinds whose notes the API lists with a job (``notes``), and its check against onnxruntime.
NOTE_KINDS: tuple[EventKind, ...] = (*sorted(_NOTICES), EventKind.COMPARED)

#: A payload key written only when set (``None`` leaves it out of :meth:`Event.as_dict`).
_OPTIONAL = {"optional": True}
#: A payload key that is not a Python name (``while``).
_KEY = "key"


def _optional(key: str | None = None) -> Any:
    meta = dict(_OPTIONAL, **({_KEY: key} if key else {}))
    return field(default=None, metadata=meta)


@dataclass(frozen=True)
class Event:
    """A job event: its kind (``KIND``) and payload (the dataclass fields)."""

    KIND: ClassVar[EventKind]

    @property
    def kind(self) -> str:
        """The stored kind: an :class:`EventKind` (an unknown row's own string otherwise)."""
        return self.KIND

    @property
    def is_phase(self) -> bool:
        return isinstance(self.kind, EventKind) and self.kind.is_phase

    @property
    def notice(self) -> str | None:
        """The one line a notice event says (:attr:`EventKind.is_notice`); None for the rest."""
        return None

    def as_dict(self) -> dict[str, Any]:
        """The payload as stored in ``job_events.payload``."""
        doc: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("optional") and value is None:
                continue
            doc[f.metadata.get(_KEY, f.name)] = value
        return doc

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> Event:
        """The event of ``payload``; :class:`UnknownEvent` when a required key is missing."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            key = f.metadata.get(_KEY, f.name)
            if key in payload:
                values[f.name] = payload[key]
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                return UnknownEvent(cls.KIND, dict(payload))
        return cls(**values)


@dataclass(frozen=True)
class UnknownEvent(Event):
    """A stored row of a kind this version does not know (or an old payload): kept as stored."""

    name: str
    payload: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.name

    @property
    def notice(self) -> str | None:
        # A known notice kind whose payload did not parse still says a line, as it always did.
        if self.name in _NOTICES:
            return str(self.payload.get("message", self.name))
        return None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.payload)


@dataclass(frozen=True)
class _Notice(Event):
    @property
    def notice(self) -> str | None:
        return str(getattr(self, "message", self.kind))


# The job's life in the queue.


@dataclass(frozen=True)
class Queued(Event):
    KIND = EventKind.QUEUED
    options: dict[str, Any]


@dataclass(frozen=True)
class Claimed(Event):
    KIND = EventKind.CLAIMED
    worker_id: str
    attempt: int


@dataclass(frozen=True)
class Released(Event):
    KIND = EventKind.RELEASED
    worker_id: str
    reason: str


@dataclass(frozen=True)
class Paused(Event):
    KIND = EventKind.PAUSED
    reason: str


@dataclass(frozen=True)
class CancelRequested(Event):
    KIND = EventKind.CANCEL_REQUESTED


@dataclass(frozen=True)
class TimeCap(Event):
    KIND = EventKind.TIME_CAP
    time_cap_minutes: float


@dataclass(frozen=True)
class _JobMoved(Event):
    """A job left ``running``: requeued after its worker vanished, or ended (the job's status).
    Each key is there only when it says something."""

    worker_id: str | None = _optional()
    attempts: int | None = _optional()
    error: str | None = _optional()
    artifact_id: int | None = _optional()
    time_cap_minutes: float | None = _optional()
    #: What the job was doing when cancelled (``"queued"``).
    while_: str | None = _optional("while")


@dataclass(frozen=True)
class Requeued(_JobMoved):
    KIND = EventKind.REQUEUED


@dataclass(frozen=True)
class Succeeded(_JobMoved):
    KIND = EventKind.SUCCEEDED


@dataclass(frozen=True)
class Failed(_JobMoved):
    KIND = EventKind.FAILED


@dataclass(frozen=True)
class Cancelled(_JobMoved):
    KIND = EventKind.CANCELLED


# The engine.


@dataclass(frozen=True)
class Extracted(Event):
    KIND = EventKind.EXTRACTED
    model_id: int
    tasks: list[dict[str, Any]]
    layout: dict[str, Any]


@dataclass(frozen=True)
class LayoutFallback(_Notice):
    KIND = EventKind.LAYOUT_FALLBACK
    message: str


@dataclass(frozen=True)
class SearchPlanned(Event):
    """Totals, and per task to tune (in search order) its allocated trials and why."""

    KIND = EventKind.SEARCH_PLANNED
    tasks: int
    to_tune: int
    trials: int
    already_recorded: int
    rule: str = ""
    allocation: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class SpaceDropped(_Notice):
    KIND = EventKind.SPACE_DROPPED
    space: str
    task: str
    task_index: int
    reason: str
    message: str


@dataclass(frozen=True)
class _CostModel(Event):
    records: int
    workloads: int
    added: int
    source: str
    seconds: float


@dataclass(frozen=True)
class CostModelWarmStart(_CostModel):
    KIND = EventKind.COST_MODEL_WARM_START


@dataclass(frozen=True)
class CostModelSaved(_CostModel):
    KIND = EventKind.COST_MODEL_SAVED


@dataclass(frozen=True)
class TrialBatch(Event):
    """One task's batch was measured: its trials so far and best."""

    KIND = EventKind.TRIAL_BATCH
    task_index: int
    task: str
    op: str
    shape: str
    trials: int
    budget: int
    best_gflops: float | None
    best_ms: float | None
    errors: int


@dataclass(frozen=True)
class TaskStopped(Event):
    KIND = EventKind.TASK_STOPPED
    task_index: int
    task: str
    trials: int
    budget: int
    best_gflops: float | None
    reason: str
    spare_trials: int


@dataclass(frozen=True)
class SearchFallback(_Notice):
    KIND = EventKind.SEARCH_FALLBACK
    message: str
    tasks: int


@dataclass(frozen=True)
class Confirmed(Event):
    KIND = EventKind.CONFIRMED
    summary: str
    tasks: list[dict[str, Any]]
    out_of_time: list[str]


@dataclass(frozen=True)
class BuildStarted(Event):
    KIND = EventKind.BUILD_STARTED
    trials_measured: int
    reason: str
    winograd_convs: int
    reused_artifact: int | None


@dataclass(frozen=True)
class BuildFallback(_Notice):
    KIND = EventKind.BUILD_FALLBACK
    message: str


@dataclass(frozen=True)
class Verified(Event):
    """``Verification.as_dict()`` and, for a fleet's artifact, where it was verified too."""

    KIND = EventKind.VERIFIED
    passed: bool
    max_abs_err: float
    max_rel_err: float
    rtol: float
    atol: float
    seed: int
    worst_output: str
    on_device: dict[str, Any] | None
    max_steps: float | None = None
    top1_agreement: float | None = None
    step_tolerance: float | None = None


@dataclass(frozen=True)
class Compared(Event):
    """``PeerCheck.as_dict()``: the artifact timed against onnxruntime, and the widest gaps."""

    KIND = EventKind.COMPARED
    threads: int
    ms: float | None
    ort_ms: float | None
    gaps: list[dict[str, Any]]
    error: str | None
    ratio: float | None
    message: str


@dataclass(frozen=True)
class Done(Event):
    KIND = EventKind.DONE
    artifact_id: int
    so_path: str


@dataclass(frozen=True)
class MeasureStarted(Event):
    KIND = EventKind.MEASURE_STARTED
    threads: int


@dataclass(frozen=True)
class MeasureFailed(Event):
    KIND = EventKind.MEASURE_FAILED
    error: str


@dataclass(frozen=True)
class Measured(Event):
    KIND = EventKind.MEASURED
    median_ms: float | None
    time_vs_ort: float | None


#: The payload class of each kind.
EVENT_TYPES: dict[EventKind, type[Event]] = {
    cls.KIND: cls
    for cls in (
        Queued, Claimed, Requeued, Released, Paused, CancelRequested, TimeCap, Succeeded,
        Failed, Cancelled, Extracted, LayoutFallback, SearchPlanned, SpaceDropped,
        CostModelWarmStart, TrialBatch, TaskStopped, SearchFallback, CostModelSaved, Confirmed,
        BuildStarted, BuildFallback, Verified, Compared, Done, MeasureStarted, MeasureFailed,
        Measured,
    )
}  # fmt: skip


def parse_event(kind: str, payload: dict[str, Any] | None) -> Event:
    """The typed event of a stored row (``job_events.kind``/``payload``): an
    :class:`UnknownEvent` for a kind this version does not know, or a payload without the keys
    its kind needs; keys it does not know are dropped."""
    body = payload if isinstance(payload, dict) else {}
    try:
        cls = EVENT_TYPES[EventKind(kind)]
    except ValueError:
        return UnknownEvent(str(kind), dict(body))
    return cls.from_dict(body)


def job_ended(status: str, payload: dict[str, Any]) -> Event:
    """The event a job's move to ``status`` (a ``JobStatus`` or ``requeued``) writes."""
    return parse_event(status, payload)


#: Where the engine sends its events (the CLI's progress view, the worker's recorder).
EventSink = Callable[[Event], None]


def emit(sink: EventSink | None, event: Event) -> None:
    """Send ``event`` to ``sink``, if there is one."""
    if sink is not None:
        sink(event)


class BuildCancelled(Exception):
    """``tune_model``'s ``cancel`` hook said stop: the search has returned and nothing is built."""
