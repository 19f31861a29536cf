"""View models of the dashboard pages: database rows in, plain dicts (JSON-ready) out.

Times are in ms, rates in GFLOP/s. Anything not measured is ``None`` (the templates print "—"),
never a made-up number: no peak stored on the target → no "% of peak".
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from convtune.db.models import (
    ArtifactRow,
    JobRow,
    ModelRow,
    ModelWorkloadRow,
    TargetRow,
    TuningRecordRow,
    WorkloadRow,
)
from convtune.db.stats import NO_RECORDS, RecordStats, record_stats
from convtune.tuner.options import task_budget

from ..app.core.errors import not_found
from . import series
from .traces import summarize_trace

BYTES_PER_ELEMENT = 4  # fp32
ORT_OTHER_PREFIX = "(onnxruntime"
CONTENDERS = ("untuned", "tuned", "onnxruntime")


# ---------------------------------------------------------------------------------------------
# shared lookups
# ---------------------------------------------------------------------------------------------


def peak_of(session: Session, target_id: int | None) -> float | None:
    """The target's measured all-cores peak, or None when ``convtune peak`` never ran."""
    if target_id is None:
        return None
    return session.scalar(select(TargetRow.peak_gflops_all).where(TargetRow.id == target_id))


def _latest_artifact(session: Session, model_id: int) -> ArtifactRow | None:
    return session.scalars(
        select(ArtifactRow)
        .where(ArtifactRow.model_id == model_id, ArtifactRow.verified.is_(True))
        .order_by(ArtifactRow.id.desc())
        .limit(1)
    ).first()


def _bench_result(artifact: ArtifactRow | None, contender: str) -> dict[str, Any] | None:
    bench = artifact.bench if artifact is not None else None
    if not isinstance(bench, dict):
        return None
    result = (bench.get("results") or {}).get(contender)
    return result if isinstance(result, dict) else None


def artifact_view(artifact: ArtifactRow | None) -> dict[str, Any] | None:
    if artifact is None:
        return None
    return {
        "id": artifact.id,
        "sha256": artifact.sha256,
        "verified": artifact.verified,
        "max_abs_err": artifact.max_abs_err,
        "download_url": f"/api/artifacts/{artifact.id}/download",
        "manifest_url": f"/api/artifacts/{artifact.id}/download?file=manifest",
    }


# ---------------------------------------------------------------------------------------------
# models list
# ---------------------------------------------------------------------------------------------


def models_overview(session: Session, *, offset: int, limit: int) -> list[dict[str, Any]]:
    """One dict per model (id order): size, #workloads, best bench latency, latest job."""
    models = session.scalars(select(ModelRow).order_by(ModelRow.id).offset(offset).limit(limit))
    out = []
    for model in models:
        workloads = session.scalar(
            select(func.count(ModelWorkloadRow.id)).where(ModelWorkloadRow.model_id == model.id)
        )
        job = session.scalars(
            select(JobRow).where(JobRow.model_id == model.id).order_by(JobRow.id.desc()).limit(1)
        ).first()
        best_ms, ratio = _best_latency(session, model.id)
        out.append(
            {
                "id": model.id,
                "name": model.name,
                "size_bytes": model.size_bytes,
                "workloads": workloads or 0,
                "best_ms": best_ms,
                "vs_ort": ratio,
                "job": {"id": job.id, "status": job.status} if job else None,
            }
        )
    return out


def _best_latency(session: Session, model_id: int) -> tuple[float | None, float | None]:
    """Fastest benched tuned latency of the model's artifacts and its ratio to onnxruntime."""
    best: tuple[float | None, float | None] = (None, None)
    for artifact in session.scalars(
        select(ArtifactRow).where(ArtifactRow.model_id == model_id, ArtifactRow.bench.is_not(None))
    ):
        tuned = _bench_result(artifact, "tuned")
        if tuned and tuned.get("median_ms") and (best[0] is None or tuned["median_ms"] < best[0]):
            best = (tuned["median_ms"], tuned.get("time_vs_ort"))
    return best


# ---------------------------------------------------------------------------------------------
# model / job page: one row per layer
# ---------------------------------------------------------------------------------------------


def _error_counts(session: Session, workload_ids: list[int]) -> dict[int, tuple[int, int]]:
    """workload id → (build errors, run errors); the builder's messages name the build."""
    if not workload_ids:
        return {}
    err = TuningRecordRow.error
    is_build = err.like("build%") | err.like("LocalBuilder%")
    query = (
        select(
            TuningRecordRow.workload_id,
            func.sum(case((err.is_not(None) & is_build, 1), else_=0)),
            func.sum(case((err.is_not(None) & ~is_build, 1), else_=0)),
        )
        .where(TuningRecordRow.workload_id.in_(workload_ids))
        .group_by(TuningRecordRow.workload_id)
    )
    return {wid: (int(b or 0), int(r or 0)) for wid, b, r in session.execute(query)}


def _profile_by_task(artifact: ArtifactRow | None) -> dict[str, dict[str, Any]]:
    profile = artifact.profile if artifact is not None else None
    if not isinstance(profile, list):
        return {}
    return {row["layer"]: row for row in profile if isinstance(row, dict) and "layer" in row}


def layer_page(session: Session, model: ModelRow, job: JobRow | None) -> dict[str, Any]:
    """Everything the model/job page shows; also the JSON its live updates fetch.

    ``job`` None → the model's latest job (if any) gives the budget and the target.
    """
    if job is None:
        job = session.scalars(
            select(JobRow).where(JobRow.model_id == model.id).order_by(JobRow.id.desc()).limit(1)
        ).first()
    artifact = (
        session.get(ArtifactRow, job.artifact_id)
        if job is not None and job.artifact_id
        else _latest_artifact(session, model.id)
    )
    target_id = job.target_id if job is not None else (artifact.target_id if artifact else None)
    peak = peak_of(session, target_id)
    per_task = int((job.options or {}).get("trials_per_task") or 0) if job else 0
    mws = session.scalars(
        select(ModelWorkloadRow)
        .where(ModelWorkloadRow.model_id == model.id)
        .order_by(ModelWorkloadRow.position, ModelWorkloadRow.id)
    ).all()
    ids = sorted({m.workload_id for m in mws if m.workload_id is not None})
    stats = record_stats(session, ids)
    errors = _error_counts(session, ids)
    profile = _profile_by_task(artifact)
    rows = [_layer_row(mw, stats, errors, profile, per_task, peak) for mw in mws]
    _fill_shares(rows)
    # Layers sharing a workload are tuned once: totals count each workload once.
    trials = {r["workload_id"]: r["trials"] for r in rows if r["workload_id"] is not None}
    budgets = {w: r["budget"] for r in rows if (w := r["workload_id"]) is not None and r["budget"]}
    done = sum(min(n, budgets[w]) if w in budgets else n for w, n in trials.items())
    return {
        "model": {"id": model.id, "name": model.name, "sha256": model.sha256},
        "job": _job_view(job),
        "peak_gflops": peak,
        "rows": rows,
        "trials_done": done,
        "trials_budget": sum(budgets.values()) if budgets else None,
        "artifact": artifact_view(artifact),
        "time_split": time_split(rows, artifact),
        "profiled": bool(profile),
    }


def _job_view(job: JobRow | None) -> dict[str, Any] | None:
    if job is None:
        return None
    return {
        "id": job.id,
        "status": job.status,
        "error": job.error,
        "options": job.options,
        "created_at": job.created_at.isoformat(timespec="seconds"),
        "finished_at": job.finished_at.isoformat(timespec="seconds") if job.finished_at else None,
    }


def _layer_row(
    mw: ModelWorkloadRow,
    stats: dict[int, RecordStats],
    errors: dict[int, tuple[int, int]],
    profile: dict[str, dict[str, Any]],
    per_task: int,
    peak: float | None,
) -> dict[str, Any]:
    wid = mw.workload_id
    stat = stats.get(wid, NO_RECORDS) if wid is not None else NO_RECORDS
    task = str(mw.description.get("task", ""))
    prof = profile.get(task, {})
    best, best_ms = stat.best_gflops, stat.best_ms
    return {
        "position": mw.position,
        "workload_id": wid,
        "task": task,
        "onnx_nodes": [str(n) for n in mw.onnx_nodes],
        "op": mw.op,
        "kind": mw.kind,
        "shape": str(mw.description.get("shape", "")),
        "flops": mw.flops,
        "occurrences": mw.occurrences,
        "trials": stat.trials,
        "budget": task_budget(mw.kind, per_task) if per_task else None,
        "best_gflops": best,
        "pct_peak": 100.0 * best / peak if best and peak else None,
        # Time of the layer in one inference: every occurrence runs the same kernel.
        "tuned_ms": best_ms * mw.occurrences if best_ms is not None else None,
        "profile_ms": prof.get("ms"),
        "ort_ms": prof.get("ort_ms"),
        "share": None,
        "build_errors": errors.get(wid, (0, 0))[0] if wid is not None else 0,
        "run_errors": errors.get(wid, (0, 0))[1] if wid is not None else 0,
    }


def _fill_shares(rows: list[dict[str, Any]]) -> None:
    """Share of the model's time per layer: profiled times if any, else tuning's best times."""
    key = "profile_ms" if any(r["profile_ms"] for r in rows) else "tuned_ms"
    total = sum(r[key] or 0.0 for r in rows)
    for row in rows:
        row["share"] = (row[key] or 0.0) / total if total and row[key] is not None else None


def time_split(rows: list[dict[str, Any]], artifact: ArtifactRow | None) -> dict[str, Any]:
    """Stacked-bar data: per contender, ms per layer (one Plotly trace per layer).

    Per-layer times come from the artifact's profile (tuned and onnxruntime); without one, the
    tuned bar uses tuning's best kernel times. A contender known only end to end (bench) gets
    one "whole model" segment. ``source`` says which was used.
    """
    profile = (
        artifact.profile if artifact is not None and isinstance(artifact.profile, list) else []
    )
    traces: dict[str, dict[str, float]] = {}

    def add(layer: str, contender: str, ms: float | None) -> None:
        if ms:
            traces.setdefault(layer, {})[contender] = ms

    if profile:
        for prow in profile:
            layer = prow.get("layer", "?")
            label = f"{prow.get('op') or ''} {layer}".strip()
            add(label, "tuned", prow.get("ms"))
            add(label, "onnxruntime", prow.get("ort_ms"))
        source = "profile"
    else:
        for row in rows:
            label = f"{row['op']} {' '.join(row['onnx_nodes']) or row['task']}"
            add(label, "tuned", row["tuned_ms"])
        source = "tuning measurements (kernels only)"
    known = {c for per in traces.values() for c in per}
    for contender in CONTENDERS:
        bench = _bench_result(artifact, contender)
        if contender not in known and bench and bench.get("median_ms"):
            add(f"whole model ({contender}, bench)", contender, bench["median_ms"])
    return {
        "contenders": list(CONTENDERS),
        "traces": [
            {"name": name, "y": [per.get(c) for c in CONTENDERS]} for name, per in traces.items()
        ],
        "source": source,
    }


# ---------------------------------------------------------------------------------------------
# layer page
# ---------------------------------------------------------------------------------------------


def arithmetic_intensity(kind: str, description: dict[str, Any], flops: float) -> float | None:
    """FLOPs per byte moved at least once (inputs, weights, outputs in fp32), or None."""
    if kind == "conv":
        tensors = [description.get(k) for k in ("input", "weight", "output")]
        if not all(isinstance(t, list) for t in tensors):
            return None
        elements = sum(math.prod(t) for t in tensors if t)
    elif kind in ("gemm", "matmul") and all(k in description for k in "MNK"):
        m, n, k = (int(description[x]) for x in "MNK")
        elements = m * k + k * n + m * n
    else:
        return None
    return flops / (elements * BYTES_PER_ELEMENT) if elements else None


def layer_detail(
    session: Session, workload_id: int, *, page: int = 1, per_page: int = 50
) -> dict[str, Any]:
    """The layer page: charts (downsampled, best curve exact), the best schedule, a trials page."""
    workload = session.get(WorkloadRow, workload_id)
    if workload is None:
        raise not_found("workload", workload_id)
    uses = session.scalars(
        select(ModelWorkloadRow).where(ModelWorkloadRow.workload_id == workload_id)
    ).all()
    rows = session.execute(
        select(
            TuningRecordRow.id,
            TuningRecordRow.created_at,
            TuningRecordRow.mean_sec,
            TuningRecordRow.gflops,
            TuningRecordRow.error,
        )
        .where(TuningRecordRow.workload_id == workload_id)
        .order_by(TuningRecordRow.id)
    ).all()
    trials = series.trials_from_rows([tuple(r) for r in rows])
    best_row = session.scalars(
        select(TuningRecordRow)
        .where(TuningRecordRow.workload_id == workload_id, TuningRecordRow.mean_sec.is_not(None))
        .order_by(TuningRecordRow.mean_sec, TuningRecordRow.id)
        .limit(1)
    ).first()
    first = uses[0] if uses else None
    flops = workload.flops or (first.flops if first else 0.0)
    peak = peak_of(session, workload.target_id)
    best_gflops = best_row.gflops if best_row is not None else None
    failed = sum(t.failed for t in trials)
    return {
        "workload": {"id": workload.id, "task": workload.task_name, "flops": flops},
        "uses": [
            {
                "model_id": u.model_id,
                "onnx_nodes": [str(n) for n in u.onnx_nodes],
                "op": u.op,
                "shape": str(u.description.get("shape", "")),
            }
            for u in uses
        ],
        "trial_count": len(trials),
        "failed_count": failed,
        "best_curve": series.as_columns(series.best_so_far(trials)),
        "scatter": series.as_columns(series.thin(trials)),
        "best": _best_view(best_row),
        "peak_gflops": peak,
        "roofline": {
            "intensity": arithmetic_intensity(first.kind, first.description, flops)
            if first
            else None,
            "gflops": best_gflops,
            "peak_gflops": peak,
        },
        "table": _trials_page(session, workload_id, len(trials), page, per_page),
    }


def _best_view(record: TuningRecordRow | None) -> dict[str, Any] | None:
    if record is None:
        return None
    return {
        "record_id": record.id,
        "ms": record.mean_sec * 1e3 if record.mean_sec is not None else None,
        "gflops": record.gflops,
        "space": record.space,
        "trial_index": record.trial_index,
        "schedule": summarize_trace(record.trace).as_dict(),
    }


def _trials_page(
    session: Session, workload_id: int, total: int, page: int, per_page: int
) -> dict[str, Any]:
    pages = max(1, -(-total // per_page))
    page = min(max(1, page), pages)
    records = session.execute(
        select(
            TuningRecordRow.id,
            TuningRecordRow.trial_index,
            TuningRecordRow.job_id,
            TuningRecordRow.mean_sec,
            TuningRecordRow.gflops,
            TuningRecordRow.error,
            TuningRecordRow.created_at,
        )
        .where(TuningRecordRow.workload_id == workload_id)
        .order_by(TuningRecordRow.id)
        .offset((page - 1) * per_page)
        .limit(per_page)
    ).all()
    return {
        "page": page,
        "pages": pages,
        "rows": [
            {
                "id": rid,
                "trial_index": index,
                "job_id": job_id,
                "ms": mean * 1e3 if mean is not None else None,
                "gflops": gflops,
                "error": (error or "").splitlines()[0][:160] if error else None,
                "created_at": created.isoformat(timespec="seconds"),
            }
            for rid, index, job_id, mean, gflops, error, created in records
        ],
    }
