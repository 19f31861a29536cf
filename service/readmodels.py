"""The read model of the service: what the API and the dashboard show, computed once, typed.

The REST API (``app/crud.py`` → ``app/schemas.py``) and the dashboard (``dashboard/views.py``)
used to derive per-layer progress each on its own, and to read the stored bench and profile
documents by string key; the copies drifted (one counted a layer without a budget as done, the
other as not started). Here each figure has one definition over the ORM rows, and the results are
frozen dataclasses: neither ORM rows nor API schemas, so the two presentations can only differ in
how they print the same values.

- :func:`job_progress`: per-layer trials, budget and best figures of a model's layers in a job,
  and the job's totals.
- :func:`bench_summary`: the artifact's end-to-end bench (``tuner/bench.py``'s document).
- :func:`profile_rows`: the artifact's per-layer profile (``tuner/profile.py``'s rows).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from convtune.db.models import ArtifactRow, JobEventRow, JobRow, ModelWorkloadRow
from convtune.db.stats import NO_RECORDS, record_stats
from convtune.tuner.events import EventKind
from convtune.tuner.options import task_budget

# ---------------------------------------------------------------------------------------------
# per-layer progress
# ---------------------------------------------------------------------------------------------


class LayerBudgets:
    """How many trials each layer of a job gets in all (its records before the job included).

    Since the Conv/Gemm tasks share a pool split by expected gain (``tuner/search/allocation.py``),
    a layer's budget is what the job's latest ``search_planned`` event allocated to it; a layer
    absent from that plan had all its trials already. Before the job plans (queued, extracting)
    the budget is the flat per-task figure of its options.
    """

    def __init__(self, session: Session, job: JobRow | None) -> None:
        options = (job.options or {}) if job is not None else {}
        self.per_task = int(options.get("trials_per_task") or 0)
        self.planned: dict[int, int] | None = None
        if job is not None:
            payload = session.scalars(
                select(JobEventRow.payload)
                .where(JobEventRow.job_id == job.id, JobEventRow.kind == EventKind.SEARCH_PLANNED)
                .order_by(JobEventRow.id.desc())
                .limit(1)
            ).first()
            if isinstance(payload, dict):
                self.planned = {
                    int(row["task_index"]): int(row["budget"])
                    for row in payload.get("allocation", [])
                    if isinstance(row, dict) and "task_index" in row and "budget" in row
                }

    def of(self, row: ModelWorkloadRow, trials: int) -> int | None:
        """The budget of layer ``row`` with ``trials`` recorded; None without a job."""
        if self.planned is not None:
            return self.planned.get(row.position, trials)
        return task_budget(row.kind, self.per_task) if self.per_task else None


@dataclass(frozen=True)
class LayerProgress:
    """One layer of a model (a ``model_workloads`` row) and how far its tuning got.

    ``trials`` counts every record of its workload under the current timing, as the search does
    when it resumes (trials of earlier jobs or other models count); ``trials_this_job`` only the
    job's (None without a job). ``budget`` is None when nothing gives one (no job, or a job
    without a per-task figure and no plan yet).
    """

    position: int
    workload_id: int | None
    op: str
    kind: str
    onnx_nodes: list[Any]
    description: dict[str, Any]
    flops: float
    occurrences: int
    trials: int
    trials_this_job: int | None
    budget: int | None
    best_gflops: float | None
    best_ms: float | None


@dataclass(frozen=True)
class JobProgress:
    """A model's layers in position order and the totals of a job over them.

    Layers sharing one workload are tuned once, so totals count each workload once (the budget
    of its last layer). ``trials_done`` counts a workload's trials up to its budget, all of them
    when it has no budget; ``trials_budget`` sums the budgets, None when no workload has one.
    """

    layers: list[LayerProgress]
    trials_done: int
    trials_budget: int | None


def _model_layers(session: Session, model_id: int) -> list[ModelWorkloadRow]:
    return list(
        session.scalars(
            select(ModelWorkloadRow)
            .where(ModelWorkloadRow.model_id == model_id)
            .order_by(ModelWorkloadRow.position, ModelWorkloadRow.id)
        )
    )


def job_progress(session: Session, model_id: int, job: JobRow | None) -> JobProgress:
    """Per-layer progress of model ``model_id`` in ``job`` (None: no job, so no budgets and no
    per-job counts), from ``tuning_records`` and the job's latest plan."""
    rows = _model_layers(session, model_id)
    workload_ids = [r.workload_id for r in rows]
    overall = record_stats(session, workload_ids)
    mine = record_stats(session, workload_ids, job_id=job.id) if job is not None else None
    budgets_of = LayerBudgets(session, job)
    layers = []
    trials: dict[int, int] = {}
    budgets: dict[int, int | None] = {}
    for row in rows:
        key = row.workload_id if row.workload_id is not None else -1
        stat = overall.get(key, NO_RECORDS)
        budget = budgets_of.of(row, stat.trials)
        layers.append(
            LayerProgress(
                position=row.position,
                workload_id=row.workload_id,
                op=row.op,
                kind=row.kind,
                onnx_nodes=list(row.onnx_nodes),
                description=dict(row.description),
                flops=row.flops,
                occurrences=row.occurrences,
                trials=stat.trials,
                trials_this_job=mine.get(key, NO_RECORDS).trials if mine is not None else None,
                budget=budget,
                best_gflops=stat.best_gflops,
                best_ms=stat.best_ms,
            )
        )
        if row.workload_id is not None:
            trials[row.workload_id] = stat.trials
            budgets[row.workload_id] = budget
    done = sum(min(n, b) if (b := budgets[w]) else n for w, n in trials.items())
    given = [b for b in budgets.values() if b]
    return JobProgress(layers, done, sum(given) if given else None)


# ---------------------------------------------------------------------------------------------
# bench summary
# ---------------------------------------------------------------------------------------------

#: The contenders of a bench document, in the order the pages show them.
CONTENDERS = ("untuned", "tuned", "onnxruntime", "openvino")


@dataclass(frozen=True)
class ContenderResult:
    """One contender's end-to-end latency in a bench: its median and, for ours, the ratio of
    its time to onnxruntime's (> 1: slower)."""

    median_ms: float | None
    time_vs_ort: float | None = None


@dataclass(frozen=True)
class BenchSummary:
    """An artifact's bench (``ArtifactRow.bench``): per contender its result, and the threads."""

    results: Mapping[str, ContenderResult] = field(default_factory=dict)
    threads: int | None = None

    def of(self, contender: str) -> ContenderResult | None:
        return self.results.get(contender)

    def median_ms(self, contender: str) -> float | None:
        result = self.results.get(contender)
        return result.median_ms if result is not None else None

    @property
    def tuned_ms(self) -> float | None:
        return self.median_ms("tuned")

    @property
    def ort_ms(self) -> float | None:
        return self.median_ms("onnxruntime")

    @property
    def openvino_ms(self) -> float | None:
        return self.median_ms("openvino")

    @property
    def time_vs_ort(self) -> float | None:
        tuned = self.results.get("tuned")
        return tuned.time_vs_ort if tuned is not None else None


NO_BENCH = BenchSummary()


def bench_summary(artifact: ArtifactRow | None) -> BenchSummary:
    """The artifact's bench, read once from its JSON; :data:`NO_BENCH` when it has none.

    A contender whose entry is not a mapping is left out; a figure it lacks is None.
    """
    bench = artifact.bench if artifact is not None else None
    if not isinstance(bench, dict):
        return NO_BENCH
    raw = bench.get("results") or {}
    results = {
        name: ContenderResult(entry.get("median_ms"), entry.get("time_vs_ort"))
        for name, entry in raw.items()
        if isinstance(entry, dict)
    }
    return BenchSummary(results, bench.get("threads"))


# ---------------------------------------------------------------------------------------------
# profile rows
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProfileRow:
    """One row of an artifact's profile: a layer (our task name, or onnxruntime's nodes we do
    not map to one), our time and onnxruntime's in one inference, its ONNX op and nodes."""

    layer: str | None
    ms: float | None
    ort_ms: float | None
    op: str
    onnx_nodes: list[str]


def profile_rows(artifact: ArtifactRow | None) -> list[ProfileRow]:
    """The artifact's profile rows in stored order; none when it was not profiled."""
    profile = artifact.profile if artifact is not None else None
    if not isinstance(profile, list):
        return []
    return [
        ProfileRow(
            layer=str(row["layer"]) if "layer" in row else None,
            ms=row.get("ms"),
            ort_ms=row.get("ort_ms"),
            op=str(row.get("op") or ""),
            onnx_nodes=[str(n) for n in row.get("onnx_nodes") or []],
        )
        for row in profile
        if isinstance(row, dict)
    ]
