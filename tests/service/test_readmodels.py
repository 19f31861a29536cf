"""The read model on a real migrated database (SQLite and PostgreSQL): per-layer progress, the
bench summary and the profile rows, and that the API and the dashboard show the same progress."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from sqlalchemy.orm import Session

from convtune.db.models import (
    ArtifactRow,
    JobEventRow,
    JobRow,
    ModelRow,
    ModelWorkloadRow,
    TargetRow,
    TuningRecordRow,
    WorkloadRow,
)
from convtune.service.readmodels import (
    NO_BENCH,
    ContenderResult,
    bench_summary,
    job_progress,
    profile_rows,
)
from convtune.tuner.options import OTHER_TASK_TRIALS
from convtune.tuner.tables import clock


@dataclass
class Seeded:
    model_id: int
    job_id: int
    other_job_id: int
    conv: int  # workload ids
    gemm: int
    artifact_id: int


def _seed(engine, *, planned: bool) -> Seeded:
    """A model of four layers: a conv (3 trials, 2 of them the job's, one failed), a gemm
    (1 trial of an earlier job), an elementwise task without records and a layer with no
    workload. With ``planned`` the job's plan gives the conv 10 trials and the gemm 3 (a later
    plan overrides an earlier one)."""
    with Session(engine) as session, session.begin():
        target = TargetRow(key="t", spec={})
        model = ModelRow(
            sha256="0" * 64, name="m", size_bytes=10, path="/x", input_shapes={}, inputs=[],
            outputs=[],
        )  # fmt: skip
        session.add_all([target, model])
        session.flush()
        conv, gemm, other = (
            WorkloadRow(target_id=target.id, shash=str(i), task_name=n, mod_json="{}", flops=2e6)
            for i, n in enumerate(["fused_conv", "fused_dense", "fused_add"])
        )
        session.add_all([conv, gemm, other])
        session.flush()
        layers = [
            (conv.id, "conv", "Conv", "fused_conv"),
            (gemm.id, "gemm", "Gemm", "fused_dense"),
            (other.id, "other", "Add", "fused_add"),
            (None, "other", "Relu", "fused_relu"),
        ]
        for position, (wid, kind, op, task) in enumerate(layers):
            session.add(
                ModelWorkloadRow(
                    model_id=model.id, workload_id=wid, kind=kind, op=op,
                    description={"task": task, "shape": "1x8"}, onnx_nodes=[f"n{position}"],
                    occurrences=1, flops=2e6, position=position,
                )
            )  # fmt: skip
        earlier = JobRow(model_id=model.id, target_id=target.id, options={"trials_per_task": 4})
        job = JobRow(model_id=model.id, target_id=target.id, options={"trials_per_task": 8})
        session.add_all([earlier, job])
        session.flush()
        for wid, job_id, mean in [
            (conv.id, earlier.id, 4e-5),
            (conv.id, job.id, 1e-5),
            (conv.id, job.id, None),
            (gemm.id, earlier.id, 2e-5),
        ]:
            session.add(
                TuningRecordRow(
                    workload_id=wid, trace=[[], []], mean_sec=mean, job_id=job_id,
                    gflops=2e6 / mean / 1e9 if mean else None,
                    error=None if mean else "build failed: x",
                )
            )  # fmt: skip
        if planned:
            for budgets in ({0: 99, 1: 99}, {0: 10, 1: 3}):
                allocation = [{"task_index": i, "budget": b} for i, b in budgets.items()]
                session.add(
                    JobEventRow(
                        job_id=job.id, kind="search_planned", payload={"allocation": allocation}
                    )
                )
        artifact = ArtifactRow(
            model_id=model.id, target_id=target.id, sha256="a" * 64, path="/x.so", manifest={},
            verified=True,
            profile=[
                {"layer": "fused_conv", "op": "Conv", "ms": 0.012, "ort_ms": 0.010,
                 "onnx_nodes": ["n0"]},
                {"layer": "(onnxruntime: other nodes)", "op": "", "ms": None, "ort_ms": 0.002},
                "not a row",
            ],
            bench={"threads": 2, "results": {
                "tuned": {"median_ms": 0.02, "time_vs_ort": 1.1},
                "onnxruntime": {"median_ms": 0.018},
                "openvino": "failed",
            }},
        )  # fmt: skip
        session.add(artifact)
        session.flush()
        return Seeded(model.id, job.id, earlier.id, conv.id, gemm.id, artifact.id)


def test_job_progress_follows_the_latest_plan(db_engine) -> None:
    seeded = _seed(db_engine, planned=True)
    with Session(db_engine) as session:
        progress = job_progress(session, seeded.model_id, session.get(JobRow, seeded.job_id))
    conv, gemm, add, relu = progress.layers
    assert [layer.position for layer in progress.layers] == [0, 1, 2, 3]
    assert (conv.workload_id, conv.trials, conv.trials_this_job, conv.budget) == (
        seeded.conv,
        3,
        2,
        10,
    )
    assert conv.best_gflops == pytest.approx(200.0) and conv.best_ms == pytest.approx(0.01)
    assert (gemm.trials, gemm.trials_this_job, gemm.budget) == (1, 0, 3)
    assert gemm.best_gflops == pytest.approx(100.0)
    # Absent from the plan: the layer had all its trials already (here none).
    assert (add.trials, add.budget, add.best_gflops, add.best_ms) == (0, 0, None, None)
    assert (relu.workload_id, relu.trials, relu.budget) == (None, 0, 0)
    assert (conv.op, conv.kind, conv.onnx_nodes, conv.description["task"]) == (
        "Conv",
        "conv",
        ["n0"],
        "fused_conv",
    )
    assert (progress.trials_done, progress.trials_budget) == (3 + 1, 10 + 3)


def test_job_progress_before_the_plan_and_without_a_job(db_engine) -> None:
    seeded = _seed(db_engine, planned=False)
    with Session(db_engine) as session:
        queued = job_progress(session, seeded.model_id, session.get(JobRow, seeded.job_id))
        no_job = job_progress(session, seeded.model_id, None)
    # Before planning: the flat per-task figure of the job's options, less for elementwise.
    other = min(8, OTHER_TASK_TRIALS)
    assert [layer.budget for layer in queued.layers] == [8, 8, other, other]
    # Totals are over workloads: the layer without one is not tuned.
    assert queued.trials_budget == 8 + 8 + other
    assert queued.trials_done == 4
    # Without a job nothing gives a budget: every trial counts as done, no per-job count.
    assert [layer.budget for layer in no_job.layers] == [None] * 4
    assert [layer.trials_this_job for layer in no_job.layers] == [None] * 4
    assert (no_job.trials_done, no_job.trials_budget) == (4, None)


def test_bench_summary_reads_each_contender_once(db_engine) -> None:
    seeded = _seed(db_engine, planned=False)
    with Session(db_engine) as session:
        bench = bench_summary(session.get(ArtifactRow, seeded.artifact_id))
    assert (bench.tuned_ms, bench.ort_ms, bench.time_vs_ort, bench.threads) == (0.02, 0.018, 1.1, 2)
    assert bench.of("onnxruntime") == ContenderResult(0.018, None)
    # A contender that failed (not a mapping) or never ran has no figures.
    assert bench.openvino_ms is None and bench.of("openvino") is None
    assert bench.median_ms("untuned") is None
    assert bench_summary(None) is NO_BENCH and NO_BENCH.tuned_ms is None


def test_profile_rows_are_typed_and_skip_junk(db_engine) -> None:
    seeded = _seed(db_engine, planned=False)
    with Session(db_engine) as session:
        artifact = session.get(ArtifactRow, seeded.artifact_id)
        rows = profile_rows(artifact)
        artifact.profile = None
        assert profile_rows(artifact) == []
    assert [(r.layer, r.op, r.ms, r.ort_ms, r.onnx_nodes) for r in rows] == [
        ("fused_conv", "Conv", 0.012, 0.010, ["n0"]),
        ("(onnxruntime: other nodes)", "", None, 0.002, []),
    ]


@pytest.mark.parametrize("planned", [True, False])
def test_the_api_and_the_dashboard_show_the_same_progress(db_engine, planned: bool) -> None:
    from convtune.service.app.crud import job_out
    from convtune.service.dashboard.views import layer_page

    seeded = _seed(db_engine, planned=planned)
    with Session(db_engine) as session:
        job = session.get(JobRow, seeded.job_id)
        api = job_out(session, job)
        page = layer_page(session, session.get(ModelRow, seeded.model_id), job)
    by_api = {p.position: (p.workload_id, p.trials, p.budget, p.best_gflops) for p in api.progress}
    by_page = {
        r["position"]: (r["workload_id"], r["trials"], r["budget"] or 0, r["best_gflops"])
        for r in page["rows"]
    }
    assert by_api == by_page
    assert len(by_api) == 4 and by_api[0][1] == 3
    assert api.trials_done == page["trials_done"] == 4
    assert (
        api.trials_budget
        == page["trials_budget"]
        == (13 if planned else 16 + min(8, OTHER_TASK_TRIALS))
    )


def test_clock_reads_like_a_clock() -> None:
    assert [clock(s) for s in (-5, 0, 65, 3600 + 65, 10 * 3600)] == [
        "0:00", "0:00", "1:05", "1:01:05", "10:00:00"
    ]  # fmt: skip
