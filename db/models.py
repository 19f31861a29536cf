"""The SQL schema: one ORM class per table. Alembic migrations in ``migrations/`` must match it.

Timestamps are timezone-aware UTC on the way in and on the way out (SQLite keeps no zone, so
values read back are tagged UTC). JSON columns hold plain Python data (dicts, lists, numbers).
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ColumnElement,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Select,
    String,
    Text,
    TypeDecorator,
    false,
    func,
    select,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class JobStatus(StrEnum):
    """Where a job is; stored as its value in ``jobs.status``."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})


class Timing(StrEnum):
    """How a trial was timed; stored in ``tuning_records.timing``. Times taken under different
    protocols are not comparable, so the search and the build only compare records of one."""

    #: The kernel run back to back, its weights left in cache by the previous run (every record
    #: before migration 0007).
    WARM = "warm"
    #: Every argument but the first (the input) flushed from the caches before each run, as in
    #: a model, where a layer's weights come from memory: ``EVALUATOR`` in
    #: tuner/measure/timers.py.
    COLD_WEIGHTS = "cold-weights"
    #: A re-measurement of one of a workload's fastest records, timed as it was but in rounds
    #: beside the workload's other fastest records, ``mean_sec`` the median of the rounds
    #: (tuner/search/confirm.py). Only the build's choice of a record reads these.
    CONFIRMED = "confirmed"


#: The protocol new trials are timed under, and the only one the search and the build read.
CURRENT_TIMING = Timing.COLD_WEIGHTS


# Deterministic constraint names so that later migrations can drop or alter them by name.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A ``DateTime(timezone=True)`` that always returns aware UTC datetimes.

    Naive values written are taken to be UTC already.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012 - SQLAlchemy reads it as a class attribute
        datetime: UTCDateTime(),
        # Python None is SQL NULL, not the JSON text 'null', so "IS NULL" means "absent".
        dict[str, Any]: JSON(none_as_null=True),
        list[Any]: JSON(none_as_null=True),
        Any: JSON(none_as_null=True),
    }


class _Row:
    """Columns every table has: an integer key and the UTC time the row was created."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True, sort_order=-2)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, sort_order=-1)


class TargetRow(_Row, Base):
    """A compilation target, identified by the canonical JSON of its TVM config."""

    __tablename__ = "targets"

    key: Mapped[str] = mapped_column(Text, unique=True)
    spec: Mapped[dict[str, Any]]
    peak_gflops_per_core: Mapped[float | None] = mapped_column(Float)
    peak_gflops_all: Mapped[float | None] = mapped_column(Float)
    peak_threads: Mapped[int | None] = mapped_column(Integer)
    peak_measured_at: Mapped[datetime | None]
    # (best - worst) / best of the repeated all-threads runs: how far the peak can be trusted.
    peak_spread: Mapped[float | None] = mapped_column(Float)
    # STREAM-triad GB/s on peak_threads threads: the roofline's memory slope.
    bandwidth_gbs: Mapped[float | None] = mapped_column(Float)
    # Precision ("int8", "bf16") → G operations/s of its dot-product instruction on
    # peak_threads threads: the roofs of the int8 and bf16 convs.
    dot_peaks: Mapped[dict[str, Any] | None]


# The client of rows written before clients existed, and of requests without a token.
ANONYMOUS_OWNER = "anonymous"


class ModelRow(_Row, Base):
    """An uploaded ONNX model, stored once per content hash; ``owner`` is the client whose upload
    stored it (its bytes count against that client's quota)."""

    __tablename__ = "models"

    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(Text)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    path: Mapped[str] = mapped_column(Text)
    input_shapes: Mapped[dict[str, Any]]
    inputs: Mapped[list[Any]]
    outputs: Mapped[list[Any]]
    owner: Mapped[str] = mapped_column(
        String(64), default=ANONYMOUS_OWNER, server_default=ANONYMOUS_OWNER, index=True
    )


class WorkloadRow(_Row, Base):
    """A TIR module to tune for one target.

    ``shash`` is not unique: equal hashes are only candidates, equality is
    ``tvm_ffi.structural_equal`` of the modules.
    """

    __tablename__ = "workloads"
    __table_args__ = (Index(None, "target_id", "shash"),)

    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id", ondelete="CASCADE"))
    shash: Mapped[str] = mapped_column(String(32))
    task_name: Mapped[str] = mapped_column(Text)
    mod_json: Mapped[str] = mapped_column(Text)
    flops: Mapped[float | None] = mapped_column(Float)
    # Set when a search found no schedule it had not measured: the spaces (and code version)
    # it searched, so a later job with the same spaces does not search it again.
    exhausted_key: Mapped[str | None] = mapped_column(Text, default=None)


class ModelWorkloadRow(_Row, Base):
    """One task of a model, linked to the ONNX nodes it covers and to its workload."""

    __tablename__ = "model_workloads"

    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    workload_id: Mapped[int | None] = mapped_column(
        ForeignKey("workloads.id", ondelete="SET NULL"), index=True
    )
    kind: Mapped[str] = mapped_column(String(16))
    op: Mapped[str] = mapped_column(String(64))
    description: Mapped[dict[str, Any]]
    onnx_nodes: Mapped[list[Any]]
    occurrences: Mapped[int] = mapped_column(Integer, default=1)
    flops: Mapped[float] = mapped_column(Float)
    position: Mapped[int] = mapped_column(Integer)


class TuningRecordRow(_Row, Base):
    """One measured (or failed) candidate schedule of a workload.

    ``mean_sec`` is NULL exactly when the trial failed; ``gflops`` is NULL when it failed or the
    workload's FLOP count is unknown.
    """

    __tablename__ = "tuning_records"
    __table_args__ = (Index(None, "workload_id", "mean_sec"),)

    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", ondelete="CASCADE"))
    trace: Mapped[Any]
    run_secs: Mapped[list[Any] | None]
    mean_sec: Mapped[float | None] = mapped_column(Float)
    gflops: Mapped[float | None] = mapped_column(Float)
    target: Mapped[Any | None]
    args_info: Mapped[Any | None]
    error: Mapped[str | None] = mapped_column(Text)
    trial_index: Mapped[int | None] = mapped_column(Integer)
    space: Mapped[str | None] = mapped_column(String(64))
    job_id: Mapped[int | None] = mapped_column(Integer, index=True)
    # Who measured it: "local:<host>" or the fleet device's tracker address "<fleet>@<ip>:<port>".
    device: Mapped[str | None] = mapped_column(String(255))
    timing: Mapped[str] = mapped_column(
        String(32), default=CURRENT_TIMING.value, server_default=Timing.WARM.value
    )

    @classmethod
    def trials(cls) -> ColumnElement[bool]:
        """The filter to the search's trials, under any timing: not the confirmations."""
        return cls.timing != Timing.CONFIRMED.value

    @classmethod
    def timed(cls, timing: Timing = CURRENT_TIMING) -> ColumnElement[bool]:
        """The filter to records timed under ``timing``: only they compare with each other."""
        return cls.timing == timing.value

    @classmethod
    def confirmed_query(
        cls, workload_id: int, timing: Timing = CURRENT_TIMING
    ) -> Select[TuningRecordRow]:
        """The fastest record of the workload's confirmations (tuner/search/confirm.py) taken
        after its last successful trial under ``timing``: a newer trial may beat what was
        confirmed, so an older confirmation no longer counts. What a build uses when the query
        finds one."""
        last_trial = (
            select(func.max(cls.id))
            .where(cls.workload_id == workload_id, cls.mean_sec.is_not(None), cls.timed(timing))
            .scalar_subquery()
        )
        return (
            select(cls)
            .where(
                cls.workload_id == workload_id,
                cls.timing == Timing.CONFIRMED.value,
                cls.id > func.coalesce(last_trial, 0),
            )
            .order_by(cls.mean_sec, cls.id)
            .limit(1)
        )


class FleetRow(_Row, Base):
    """Measuring machines behind one TVM RPC tracker key; its peak measured on one of them."""

    __tablename__ = "fleets"

    name: Mapped[str] = mapped_column(String(64), unique=True)
    tracker_host: Mapped[str] = mapped_column(String(255))
    tracker_port: Mapped[int] = mapped_column(Integer)
    key: Mapped[str] = mapped_column(String(255))
    target: Mapped[str | None] = mapped_column(Text)
    peak_gflops_per_core: Mapped[float | None] = mapped_column(Float)
    peak_gflops_all: Mapped[float | None] = mapped_column(Float)
    peak_threads: Mapped[int | None] = mapped_column(Integer)
    peak_device: Mapped[str | None] = mapped_column(String(255))
    peak_measured_at: Mapped[datetime | None]


class ArtifactRow(_Row, Base):
    """A compiled, verified library of a model for a target (file content-addressed by sha256)."""

    __tablename__ = "artifacts"

    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id", ondelete="CASCADE"))
    sha256: Mapped[str] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(Text)
    manifest: Mapped[dict[str, Any]]
    verified: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    max_abs_err: Mapped[float | None] = mapped_column(Float)
    profile: Mapped[Any | None]
    bench: Mapped[Any | None]


class JobRow(_Row, Base):
    """A tuning job: queued by the API or CLI, claimed and run by a worker."""

    __tablename__ = "jobs"

    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    target_id: Mapped[int | None] = mapped_column(ForeignKey("targets.id", ondelete="SET NULL"))
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.QUEUED.value, index=True)
    options: Mapped[dict[str, Any]]
    idempotency_key: Mapped[str | None] = mapped_column(String(255), unique=True)
    worker_id: Mapped[str | None] = mapped_column(String(255))
    heartbeat_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    error: Mapped[str | None] = mapped_column(Text)
    artifact_id: Mapped[int | None] = mapped_column(ForeignKey("artifacts.id", ondelete="SET NULL"))
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    # The client that queued it: quotas and the round-robin claim order (service/app/queue.py).
    owner: Mapped[str] = mapped_column(
        String(64), default=ANONYMOUS_OWNER, server_default=ANONYMOUS_OWNER, index=True
    )


class WorkerRow(_Row, Base):
    """A live worker process: it heartbeats this row while it runs (idle or busy), so
    ``/healthz`` can tell whether anyone will take queued jobs."""

    __tablename__ = "workers"

    worker_id: Mapped[str] = mapped_column(String(255), unique=True)
    host: Mapped[str] = mapped_column(Text)
    pid: Mapped[int] = mapped_column(Integer)
    heartbeat_at: Mapped[datetime] = mapped_column(index=True)
    job_id: Mapped[int | None] = mapped_column(Integer)


class JobEventRow(_Row, Base):
    """A progress event of a job; ascending ``id`` is event order."""

    __tablename__ = "job_events"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    payload: Mapped[dict[str, Any]]


class CostModelRow(_Row, Base):
    """The XGBoost cost model of one target, trained on that target's tuning records.

    ``model`` holds the bytes of ``XGBModel.save`` (booster and the feature groups it was trained
    on, zlib-compressed). ``convtune_version`` is the code that trained it (``code_version``:
    release and source digest): any other code retrains from the records instead of trusting it.
    ``last_record_id`` is the highest ``tuning_records.id`` it has seen; later records are added
    by the next update.
    """

    __tablename__ = "cost_models"

    target_id: Mapped[int] = mapped_column(
        ForeignKey("targets.id", ondelete="CASCADE"), unique=True
    )
    convtune_version: Mapped[str] = mapped_column(String(64))
    record_count: Mapped[int] = mapped_column(Integer)
    workload_count: Mapped[int] = mapped_column(Integer)
    last_record_id: Mapped[int] = mapped_column(Integer)
    model: Mapped[bytes] = mapped_column(LargeBinary)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
