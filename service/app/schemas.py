"""Request and response bodies of the HTTP API; the OpenAPI schema is generated from them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from convtune.db.models import JobStatus
from convtune.tuner.options import DEFAULT_LAYOUT, Algorithm, Layout, Precision, TuneOptions

_DEFAULTS = TuneOptions()
MAX_SEED = 2**32 - 1


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorOut(BaseModel):
    """Every 4xx/5xx body."""

    error: ErrorDetail


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of a route's error statuses, each an ``ErrorOut``.

    A route that takes a JSON body lists 400 too: FastAPI answers 400 to a body it cannot decode
    (bytes that are not UTF-8), where malformed JSON is a 422."""
    return {status: {"model": ErrorOut} for status in statuses}


class WorkloadOut(BaseModel):
    """One task of a model: the ONNX nodes it covers and how fast its best schedule is."""

    position: int
    workload_id: int | None
    onnx_nodes: list[Any]
    op: str
    kind: str
    description: dict[str, Any]
    occurrences: int
    flops: float
    trials: int = Field(description="measured trials of this workload on its target, all jobs")
    best_gflops: float | None


class ModelSummary(BaseModel):
    id: int
    sha256: str
    name: str
    size_bytes: int
    inputs: list[Any]
    outputs: list[Any]
    created_at: datetime


class ModelOut(ModelSummary):
    workloads: list[WorkloadOut]


class JobCreate(BaseModel):
    """Options of a tuning job; anything left out takes the engine's default."""

    model_config = ConfigDict(extra="forbid")

    # Upper limits are the server's settings (CONVTUNE_MAX_*; 422 limit_exceeded beyond).
    trials_per_task: int = Field(default=_DEFAULTS.trials_per_task, ge=1)
    budget_minutes: float | None = Field(
        default=_DEFAULTS.budget_minutes,
        gt=0,
        allow_inf_nan=False,
        description="minutes for the search and the confirmation after it (the build follows); "
        "None → bounded only by the server's per-job wall-clock cap",
    )
    target: str | None = Field(
        default=_DEFAULTS.target,
        max_length=1000,
        description="None → this host; or 'llvm -mcpu=znver4 -num-cores=2'",
    )
    threads: int | None = Field(default=_DEFAULTS.threads, ge=1)
    # numpy's and MetaSchedule's seed range.
    seed: int = Field(default=_DEFAULTS.seed, ge=0, le=MAX_SEED)
    retune: bool = _DEFAULTS.retune
    layout: Layout = Field(
        default=DEFAULT_LAYOUT, description="nchwc: convolutions in the blocked NCHW[x]c layout"
    )
    algorithms: list[Algorithm] = Field(
        default=list(_DEFAULTS.algorithms),
        max_length=len(Algorithm),
        description="convolution algorithms to choose from per layer by measurement; "
        "['direct'] refuses Winograd (its rounding differs)",
    )

    @field_validator("algorithms")
    @classmethod
    def _direct_always(cls, value: list[Algorithm]) -> list[Algorithm]:
        """Stored as the engine reads it: the direct convolution is always a choice."""
        return list(Algorithm.parse_list(value))

    precision: Precision = Field(
        default=_DEFAULTS.precision,
        description="bf16: convolutions in bf16 with fp32 sums on AVX-512 BF16 CPUs, verified "
        "with a bf16 tolerance",
    )
    fleet: str | None = Field(
        default=None, max_length=64, description="measure on this fleet's RPC devices (its name)"
    )
    confirm: bool = Field(
        default=_DEFAULTS.confirm,
        description="re-measure each layer's fastest kernels side by side before the build; "
        "false: build on the fastest single measurements",
    )
    compare: bool = Field(
        default=_DEFAULTS.compare,
        description="after verification, time the artifact against onnxruntime on the job's "
        "threads and name the layers of any gap (the job's 'compared' event)",
    )


class LayerProgress(BaseModel):
    position: int
    workload_id: int | None
    op: str
    kind: str
    onnx_nodes: list[Any]
    trials: int = Field(description="records of the workload, any job, failed ones included")
    trials_this_job: int
    budget: int = Field(description="trials the search gives this layer")
    best_gflops: float | None = Field(description="best of all records of the workload")


class JobOut(BaseModel):
    id: int
    model_id: int
    target_id: int | None
    status: JobStatus
    options: dict[str, Any]
    worker_id: str | None
    attempts: int
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    heartbeat_at: datetime | None
    finished_at: datetime | None
    error: str | None
    artifact_id: int | None
    trials_done: int
    trials_budget: int
    progress: list[LayerProgress]
    notes: list[str] = Field(
        default_factory=list,
        description="where the job fell back, one line each: a schedule space dropped for a "
        "layer, a search pass continued in the generic space, a build without Winograd or "
        "records, a model compiled NCHW",
    )
    peer_check: dict[str, Any] | None = Field(
        default=None,
        description="the artifact timed against onnxruntime on the job's threads: ms, ort_ms, "
        "ratio, the layers of any gap and a one-line message",
    )


class ArtifactOut(BaseModel):
    id: int
    model_id: int
    target_id: int
    sha256: str
    size_bytes: int | None = Field(description="None when the file is missing from the store")
    verified: bool
    max_abs_err: float | None
    manifest: dict[str, Any]
    created_at: datetime
    download_url: str
    manifest_url: str
