"""View models of the dashboard pages: database rows in, plain dicts (JSON-ready) out.

Times are in ms, rates in GFLOP/s. Anything not measured is ``None`` (the templates print "—"),
never a made-up number: no peak stored on the target → no "% of peak".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
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
from convtune.tuner.options import Algorithm, Layout, Precision, TuneOptions
from convtune.tuner.tables import clock, layout_label

from ..app.core.errors import not_found
from ..readmodels import (
    CONTENDERS,
    BenchSummary,
    LayerProgress,
    ProfileRow,
    bench_summary,
    job_progress,
    profile_rows,
)
from . import series
from .traces import summarize_trace

BYTES_PER_ELEMENT = 4  # fp32
ORT_OTHER_PREFIX = "(onnxruntime"


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


def artifact_notes(artifact: ArtifactRow | None) -> dict[str, Any]:
    """What the job that built ``artifact`` fell back on (one line each: spaces left out of a
    layer's search, a build without Winograd or records) and its check against onnxruntime
    (``peer_check``: its line, and the layers of the gap when slower), from the manifest."""
    manifest = artifact.manifest if artifact is not None and artifact.manifest else {}
    lines = [str(d.get("message", "")) for d in manifest.get("dropped_spaces") or []]
    if manifest.get("build_fallback"):
        lines.append(f"built with {manifest['build_fallback']}")
    check = manifest.get("peer_check") or None
    return {"fallbacks": lines, "peer_check": check}


def dropped_spaces(session: Session, workload_id: int, model_ids: Sequence[int]) -> list[str]:
    """The spaces the latest artifact of each model in ``model_ids`` left out of this
    workload's search, with the reason: "space: reason" lines, each once."""
    lines: list[str] = []
    for model_id in sorted(set(model_ids)):
        artifact = _latest_artifact(session, model_id)
        manifest = artifact.manifest if artifact is not None and artifact.manifest else {}
        for layer in manifest.get("layers") or []:
            if layer.get("workload_id") != workload_id:
                continue
            for dropped in layer.get("dropped_spaces") or []:
                line = f"{dropped.get('space')}: {dropped.get('reason')}"
                if line not in lines:
                    lines.append(line)
    return lines


def tune_form() -> dict[str, Any]:
    """Defaults and choices of the model page's Tune form, from the one definition of the options.

    The form posts JSON to ``POST /api/models/{id}/jobs``: the API's ``JobCreate`` validates it,
    exactly as for any HTTP client.
    """
    defaults = TuneOptions()
    return {
        "trials_per_task": defaults.trials_per_task,
        "budget_minutes": defaults.budget_minutes,
        "threads": defaults.threads,
        "layout": defaults.layout.value,
        "layouts": [layout.value for layout in Layout],
        "algorithms": [a.value for a in defaults.algorithms],
        # Direct is always on (every conv can run it); Winograd may be refused.
        "algorithm_choices": [a.value for a in Algorithm],
        "precision": defaults.precision.value,
        "precisions": [p.value for p in Precision],
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
        bench = bench_summary(artifact)
        ms = bench.tuned_ms
        if ms and (best[0] is None or ms < best[0]):
            best = (ms, bench.time_vs_ort)
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


def _profile_by_task(profile: list[ProfileRow]) -> dict[str, ProfileRow]:
    return {row.layer: row for row in profile if row.layer is not None}


def layer_page(session: Session, model: ModelRow, job: JobRow | None) -> dict[str, Any]:
    """Everything the model/job page shows; also the JSON its live updates fetch.

    ``job`` None → the model's latest job (if any) gives the budget and the target. Rows are
    ordered by their profiled time, else their tuned kernel time, else FLOPs: slowest first.
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
    progress = job_progress(session, model.id, job)
    ids = sorted({p.workload_id for p in progress.layers if p.workload_id is not None})
    errors = _error_counts(session, ids)
    profile = profile_rows(artifact)
    by_task = _profile_by_task(profile)
    rows = [_layer_row(layer, errors, by_task, peak) for layer in progress.layers]
    _fill_shares(rows)
    rows.sort(key=_cost_key)
    bench = bench_summary(artifact)
    return {
        "model": {"id": model.id, "name": model.name, "sha256": model.sha256},
        "job": _job_view(job),
        "peak_gflops": peak,
        "rows": rows,
        "trials_done": progress.trials_done,
        "trials_budget": progress.trials_budget,
        "progress": _progress_text(job, progress.trials_done, progress.trials_budget),
        "artifact": artifact_view(artifact),
        "bench": {
            "tuned_ms": bench.tuned_ms,
            "ort_ms": bench.ort_ms,
            "time_vs_ort": bench.time_vs_ort,
            "openvino_ms": bench.openvino_ms,
            "threads": bench.threads,
        },
        "notes": artifact_notes(artifact),
        "time_split": time_split(profile, bench),
        "top": top_layers(profile),
        "convergence": convergence(session, progress.layers, job),
        "profiled": bool(by_task),
        "over_peak": any((r["pct_peak"] or 0.0) > 100.0 for r in rows),
    }


def _progress_text(job: JobRow | None, done: int, budget: int | None) -> str | None:
    """``elapsed 1:42 · budget left 8:18 · ETA 0:51`` for a running job (what the CLI and the
    server log say), the run time once it ended, None before it started."""
    if job is None or job.started_at is None:
        return None
    end = job.finished_at or datetime.now(UTC)
    elapsed = (end - job.started_at).total_seconds()
    if job.finished_at is not None:
        return f"ran {clock(elapsed)}"
    parts = [f"elapsed {clock(elapsed)}"]
    minutes = (job.options or {}).get("budget_minutes")
    left = max(0.0, float(minutes) * 60.0 - elapsed) if minutes else None
    if left is not None:
        parts.append(f"budget left {clock(left)}")
    if budget and 0 < done < budget:
        eta = elapsed / done * (budget - done)
        parts.append(f"ETA {clock(min(eta, left) if left is not None else eta)}")
    return " · ".join(parts)


def _cost_key(row: dict[str, Any]) -> tuple[float, float, float]:
    return (
        -(row["profile_ms"] or 0.0),
        -(row["tuned_ms"] or 0.0),
        -row["flops"] * row["occurrences"],
    )


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
        "cancel_url": f"/api/jobs/{job.id}/cancel",
        "log_url": f"/jobs/{job.id}/log",
    }


def _layer_row(
    mw: LayerProgress,
    errors: dict[int, tuple[int, int]],
    profile: dict[str, ProfileRow],
    peak: float | None,
) -> dict[str, Any]:
    wid = mw.workload_id
    task = str(mw.description.get("task", ""))
    prof = profile.get(task)
    best, best_ms = mw.best_gflops, mw.best_ms
    profile_ms, ort_ms = (prof.ms, prof.ort_ms) if prof is not None else (None, None)
    return {
        "position": mw.position,
        "workload_id": wid,
        "task": task,
        "onnx_nodes": [str(n) for n in mw.onnx_nodes],
        "op": mw.op if mw.kind != "other" and mw.op else _fused_label(task),
        "kind": mw.kind,
        "shape": str(mw.description.get("shape", "")),
        # Convs only: "NCHW16c" when blocked (tuner/graph/layout.py), else "NCHW" and why; a
        # Winograd alternative of a conv says so (tuner/algorithms.py picks one per conv).
        "layout": layout_label(mw.description),
        "layout_reason": str(mw.description.get("layout_reason", "")),
        "flops": mw.flops,
        "occurrences": mw.occurrences,
        "trials": mw.trials,
        "budget": mw.budget,
        "best_gflops": best,
        "pct_peak": 100.0 * best / peak if best and peak else None,
        # Time of the layer in one inference: every occurrence runs the same kernel.
        "tuned_ms": best_ms * mw.occurrences if best_ms is not None else None,
        "profile_ms": profile_ms,
        "ort_ms": ort_ms,
        # > 1: our layer is slower than onnxruntime's nodes for it.
        "gap": profile_ms / ort_ms if profile_ms and ort_ms else None,
        "share": None,
        "build_errors": errors.get(wid, (0, 0))[0] if wid is not None else 0,
        "run_errors": errors.get(wid, (0, 0))[1] if wid is not None else 0,
    }


def _fused_label(task: str) -> str:
    """``fused_add_relu3`` → ``add_relu``: what an elementwise task computes."""
    return task.removeprefix("fused_").rstrip("0123456789") or task


def _fill_shares(rows: list[dict[str, Any]]) -> None:
    """Share of the model's time per layer, from the artifact's profile only.

    A single tuning measurement of one kernel is not its share of an inference (a BN+clip task
    measured 5.97 ms alone and 0.047 ms in the profiled model): without a profile every share
    stays None and the page says "not profiled yet".
    """
    total = sum(r["profile_ms"] or 0.0 for r in rows)
    for row in rows:
        ms = row["profile_ms"]
        row["share"] = ms / total if total and ms is not None else None


def _layer_label(prow: ProfileRow, limit: int = 2) -> str:
    nodes = prow.onnx_nodes
    if nodes:
        more = f" +{len(nodes) - limit}" if len(nodes) > limit else ""
        return ", ".join(nodes[:limit]) + more
    return prow.layer if prow.layer is not None else "?"


def _op_kind(prow: ProfileRow) -> str:
    if (prow.layer or "").startswith(ORT_OTHER_PREFIX):
        return "onnxruntime only"
    op = prow.op
    return op if op in ("Conv", "Gemm", "MatMul", "ConvTranspose") else "elementwise / other"


#: Segments named individually in the stacked bar; the rest are summed per op kind.
NAMED_SEGMENTS = 6


def time_split(profile: list[ProfileRow], bench: BenchSummary) -> dict[str, Any]:
    """Stacked-bar data: per contender, ms per segment, one colour (``kind``) per op kind.

    From the artifact's profile only: the ``NAMED_SEGMENTS`` slowest layers (by the larger of
    our and onnxruntime's time) are their own segments, named by their ONNX nodes; the others
    are summed per op kind. A contender known only end to end (bench) gets one "whole model"
    segment. Without a profile there is no per-layer split: ``source`` says so.
    """
    segments: list[dict[str, Any]] = []
    if profile:
        ranked = sorted(profile, key=lambda r: -max(r.ms or 0.0, r.ort_ms or 0.0))
        rest: dict[str, list[float]] = {}

        def bar(ours: float, theirs: float) -> list[float | None]:
            y: list[float | None] = [None] * len(CONTENDERS)
            y[CONTENDERS.index("tuned")] = ours or None
            y[CONTENDERS.index("onnxruntime")] = theirs or None
            return y

        for i, prow in enumerate(ranked):
            kind = _op_kind(prow)
            ours, theirs = prow.ms or 0.0, prow.ort_ms or 0.0
            if i < NAMED_SEGMENTS and not kind.startswith("onnxruntime"):
                segments.append({"name": _layer_label(prow), "kind": kind, "y": bar(ours, theirs)})
            else:
                acc = rest.setdefault(kind, [0.0, 0.0])
                acc[0] += ours
                acc[1] += theirs
        for kind, (ours, theirs) in rest.items():
            name = kind if kind.startswith("onnxruntime") else f"other {kind} layers"
            segments.append({"name": name, "kind": kind, "y": bar(ours, theirs)})
        source = "the artifact's profile"
    else:
        source = "nothing yet: the artifact is profiled after its job"
    known = {c for seg in segments for c, v in zip(CONTENDERS, seg["y"], strict=True) if v}
    for i, contender in enumerate(CONTENDERS):
        ms = bench.median_ms(contender)
        if contender not in known and ms:
            y: list[float | None] = [None] * len(CONTENDERS)
            y[i] = ms
            segments.append(
                {"name": f"whole model ({contender}, bench)", "kind": "whole model", "y": y}
            )
    return {"contenders": list(CONTENDERS), "traces": segments, "source": source}


TOP_N = 10


def top_layers(profile: list[ProfileRow]) -> dict[str, Any]:
    """The ``TOP_N`` layers taking the most time in the profile (ours and onnxruntime's)."""
    ours = [r for r in profile if not (r.layer or "").startswith(ORT_OTHER_PREFIX)]
    ours.sort(key=lambda r: -(r.ms or 0.0))
    total = sum(r.ms or 0.0 for r in ours)
    top = ours[:TOP_N]
    return {
        "labels": [_layer_label(r) for r in top],
        "kinds": [_op_kind(r) for r in top],
        "ours_ms": [r.ms for r in top],
        "ort_ms": [r.ort_ms for r in top],
        "share": [(r.ms or 0.0) / total if total else None for r in top],
    }


def convergence(
    session: Session, mws: Sequence[LayerProgress | ModelWorkloadRow], job: JobRow | None
) -> dict[str, Any]:
    """Best-so-far GFLOP/s of every tuned layer against seconds since the job started (the
    job's own trials; all trials of the model's workloads without a job)."""
    names: dict[int, str] = {}
    for mw in mws:
        if mw.workload_id is not None and mw.workload_id not in names:
            nodes = [str(n) for n in mw.onnx_nodes]
            label = ", ".join(nodes[:2]) + (f" +{len(nodes) - 2}" if len(nodes) > 2 else "")
            names[mw.workload_id] = (
                f"{mw.op} {label}".strip()
                if nodes
                else _fused_label(str(mw.description.get("task", "")))
            )
    if not names:
        return {"series": [], "start": None}
    query = (
        select(
            TuningRecordRow.workload_id,
            TuningRecordRow.id,
            TuningRecordRow.created_at,
            TuningRecordRow.mean_sec,
            TuningRecordRow.gflops,
            TuningRecordRow.error,
        )
        .where(TuningRecordRow.workload_id.in_(sorted(names)), TuningRecordRow.trials())
        .order_by(TuningRecordRow.id)
    )
    if job is not None:
        query = query.where(TuningRecordRow.job_id == job.id)
    per: dict[int, list[tuple[int, Any, float | None, float | None, str | None]]] = {}
    for wid, rid, created, mean, gflops, error in session.execute(query):
        per.setdefault(wid, []).append((rid, created, mean, gflops, error))
    if not per:
        return {"series": [], "start": None}
    first = min(rows[0][1] for rows in per.values())
    start = (
        job.started_at if job is not None and job.started_at and job.started_at <= first else first
    )
    out: list[dict[str, Any]] = []
    for wid, records in per.items():
        steps = series.best_so_far(series.trials_from_rows(records, start=start))
        if steps:
            out.append({"name": names[wid], "workload_id": wid, **series.as_columns(steps)})
    out.sort(key=lambda s: -(max((g for g in s["gflops"] if g is not None), default=0.0)))
    return {"series": out, "start": start.isoformat(timespec="seconds")}


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
        .where(TuningRecordRow.workload_id == workload_id, TuningRecordRow.trials())
        .order_by(TuningRecordRow.id)
    ).all()
    # Wall-clock from the start of the job that measured the first trial, if it is known.
    first_job_id = _job_of(session, rows[0][0]) if rows else None
    first_job = session.get(JobRow, first_job_id) if first_job_id is not None else None
    start = first_job.started_at if first_job is not None else None
    if start is not None and rows and start > rows[0][1]:
        start = None
    trials = series.trials_from_rows([tuple(r) for r in rows], start=start)
    best_row = session.scalars(
        select(TuningRecordRow)
        .where(
            TuningRecordRow.workload_id == workload_id,
            TuningRecordRow.mean_sec.is_not(None),
            TuningRecordRow.trials(),
        )
        .order_by(TuningRecordRow.mean_sec, TuningRecordRow.id)
        .limit(1)
    ).first()
    first = uses[0] if uses else None
    flops = workload.flops or (first.flops if first else 0.0)
    peak = peak_of(session, workload.target_id)
    bandwidth = session.scalar(
        select(TargetRow.bandwidth_gbs).where(TargetRow.id == workload.target_id)
    )
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
        "dropped_spaces": dropped_spaces(session, workload_id, [u.model_id for u in uses]),
        "best_curve": series.as_columns(series.best_so_far(trials)),
        "scatter": series.as_columns(series.thin(trials)),
        "best": _best_view(best_row),
        "built": _built_view(session, workload_id),
        "peak_gflops": peak,
        "roofline": {
            "intensity": arithmetic_intensity(first.kind, first.description, flops)
            if first
            else None,
            "gflops": best_gflops,
            "peak_gflops": peak,
            "bandwidth_gbs": bandwidth,
        },
        "wallclock_from": "job start" if start is not None else "first trial",
        "table": _trials_page(session, workload_id, len(trials), page, per_page),
    }


def _job_of(session: Session, record_id: int) -> int | None:
    return session.scalar(select(TuningRecordRow.job_id).where(TuningRecordRow.id == record_id))


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


#: How many of a workload's fastest trials may be the one a confirmation re-measured (it takes
#: at most 3, tuner/search/confirm.py, from the fastest when it ran, which no newer trial
#: displaced).
CONFIRMED_SOURCES = 8


def _built_view(session: Session, workload_id: int) -> dict[str, Any] | None:
    """What a build of the layer uses when a confirmation counts (tuner/search/confirm.py): the
    re-measured figure and the trial it re-measured; None when the build takes the fastest
    trial (no confirmation, or a trial came after it)."""
    confirmed = session.scalars(TuningRecordRow.confirmed_query(workload_id)).first()
    if confirmed is None or confirmed.mean_sec is None:
        return None
    fastest = session.scalars(
        select(TuningRecordRow)
        .where(
            TuningRecordRow.workload_id == workload_id,
            TuningRecordRow.mean_sec.is_not(None),
            TuningRecordRow.timed(),
        )
        .order_by(TuningRecordRow.mean_sec, TuningRecordRow.id)
        .limit(CONFIRMED_SOURCES)
    ).all()
    source = next((row for row in fastest if row.trace == confirmed.trace), None)
    return {
        "record_id": confirmed.id,
        "ms": confirmed.mean_sec * 1e3,
        "rounds": len(confirmed.run_secs or []),
        "space": confirmed.space,
        "trial_record_id": source.id if source else None,
        "trial_ms": source.mean_sec * 1e3 if source and source.mean_sec else None,
        "fastest_trial": source is not None and source.id == fastest[0].id,
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
        .where(TuningRecordRow.workload_id == workload_id, TuningRecordRow.trials())
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
