"""Dashboard helpers without a browser: schedule decisions read from a real TVM trace, chart
series (exact best-so-far curve, bounded scatter), roofline arithmetic intensity."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session
from tvm import te
from tvm.s_tir import Schedule

from convtune.db.models import (
    CURRENT_TIMING,
    ArtifactRow,
    ModelRow,
    ModelWorkloadRow,
    TargetRow,
    Timing,
    TuningRecordRow,
    WorkloadRow,
)
from convtune.db.ms_database import to_plain
from convtune.schedules.spaces.registry import SPACES
from convtune.service.dashboard import series
from convtune.service.dashboard.traces import summarize_trace
from convtune.service.dashboard.views import (
    arithmetic_intensity,
    layer_detail,
    layer_page,
    models_overview,
)
from convtune.tuner.graph.extract import extract_tasks
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.target import make_target
from tests.models import three_conv_cnn, to_bytes
from tests.schedules.kernels import postprocessed_designs


def _scheduled_matmul(seed: int) -> tuple[Schedule, list[int], int]:
    """A 64×64 matmul with a sampled split (inner loop vectorized) and a sampled unroll."""
    a = te.placeholder((64, 64), name="A")
    b = te.placeholder((64, 64), name="B")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    sch = Schedule(te.create_prim_func([a, b, c]), seed=seed)
    _, j, _ = sch.get_loops(sch.get_sblock("C"))
    factors = sch.sample_perfect_tile(j, n=2, max_innermost_factor=16)
    _, inner = sch.split(j, factors)
    sch.vectorize(inner)
    candidates = [0, 16, 64, 512]
    choice = sch.sample_categorical(candidates, [0.25] * 4)
    sch.annotate(sch.get_sblock("root"), "meta_schedule.unroll_explicit", choice)
    tiles = [int(sch.get(f)) for f in factors]
    unroll = int(sch.get(choice))  # the value picked, not its index
    assert unroll in candidates
    return sch, tiles, unroll


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_decisions_of_a_real_trace(seed: int) -> None:
    sch, tiles, unroll = _scheduled_matmul(seed)
    stored = to_plain(sch.trace.as_json())  # what tuning_records.trace holds
    summary = summarize_trace(stored)
    assert [t["factors"] for t in summary.tiles] == [tiles]
    assert tiles[0] * tiles[1] == 64
    assert summary.vector_lanes == [tiles[1]]
    assert summary.unroll == [unroll]
    assert summary.instructions == len(stored[0])


def test_every_design_of_our_conv_spaces_shows_its_tiles() -> None:
    """Our register-block spaces split by constants and by sampled widths, not only by perfect
    tiles (CI once showed a stem conv's best schedule with no tile sizes at all): the decisions
    of every design of every conv space that takes the convs of ``three_conv_cnn`` name a tile,
    each of its known factors positive."""
    target = make_target(None)
    _, tasks = extract_tasks(load_model(to_bytes(three_conv_cnn())), target, "nchwc")
    seen = set()
    for task in tasks:
        if task.kind != "conv":
            continue
        for space in SPACES:
            if space.name == "generic" or not space.applies_to(task.mod):
                continue
            for design in postprocessed_designs(space, task.mod, target):
                tiles = summarize_trace(to_plain(design.trace.as_json())).tiles
                assert tiles, (space.name, str(design.trace))
                assert all(f is None or f > 0 for tile in tiles for f in tile["factors"])
                seen.add(space.name)
    assert {"stem-nchw-nchwc", "nchwc-regblock"} <= seen, seen


@pytest.mark.parametrize("trace", [None, [], "x", [[], []], [[["Split"]], [["bad"]]]])
def test_malformed_traces_give_an_empty_summary(trace: object) -> None:
    summary = summarize_trace(trace)
    assert summary.tiles == [] and summary.unroll == [] and summary.vector_lanes == []


def _trials(values: list[float | None]) -> list[series.Trial]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        (i, start + timedelta(seconds=i), None if v is None else 1.0, v, None if v else "boom")
        for i, v in enumerate(values)
    ]
    return series.trials_from_rows(rows)


def test_best_so_far_keeps_improvements_and_the_end() -> None:
    trials = _trials([1.0, None, 3.0, 2.0, 5.0, 4.0, None])
    curve = series.best_so_far(trials)
    assert [(t.n, t.gflops) for t in curve] == [(1, 1.0), (3, 3.0), (5, 5.0), (7, 5.0)]
    assert [t.seconds for t in curve] == [0.0, 2.0, 4.0, 6.0]
    assert [t.failed for t in trials] == [False, True, False, False, False, False, True]


def test_thinning_bounds_the_scatter_and_keeps_extremes_and_failures() -> None:
    values: list[float | None] = [float((i * 7919) % 1000) for i in range(30_000)]
    values[12_345] = 5000.0  # the best trial
    for i in range(0, 30_000, 997):
        values[i] = None
    trials = _trials(values)
    kept = series.thin(trials, limit=2000)
    assert len(kept) <= 2000
    assert max(t.gflops or 0.0 for t in kept) == 5000.0
    assert sum(t.failed for t in kept) >= 20
    assert [t.n for t in kept] == sorted(t.n for t in kept)
    # The curve is computed on all trials, not the thinned ones: exact.
    assert series.best_so_far(trials)[-1].gflops == 5000.0
    assert series.thin(trials[:50]) == trials[:50]


def test_arithmetic_intensity() -> None:
    conv = {"input": [1, 3, 16, 16], "weight": [8, 3, 3, 3], "output": [1, 8, 16, 16]}
    elements = 3 * 256 + 8 * 27 + 8 * 256
    assert arithmetic_intensity("conv", conv, 114_688.0) == pytest.approx(
        114_688.0 / (4 * elements)
    )
    gemm = {"M": 1, "N": 10, "K": 16}
    assert arithmetic_intensity("gemm", gemm, 330.0) == pytest.approx(330.0 / (4 * 186))
    assert arithmetic_intensity("other", {}, 10.0) is None
    assert arithmetic_intensity("conv", {"input": [1]}, 10.0) is None


def _seed(engine, *, peak: float | None) -> tuple[int, int]:
    """A model with one conv layer, 3 records (one build failure), an artifact with a profile
    and a bench. Returns (model id, workload id)."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with Session(engine) as session, session.begin():
        target = TargetRow(key="t", spec={}, peak_gflops_all=peak)
        model = ModelRow(
            sha256="0" * 64, name="m", size_bytes=10, path="/x", input_shapes={}, inputs=[],
            outputs=[],
        )  # fmt: skip
        session.add_all([target, model])
        session.flush()
        workload = WorkloadRow(
            target_id=target.id, shash="1", task_name="fused_conv", mod_json="{}", flops=2e6
        )
        session.add(workload)
        session.flush()
        session.add(
            ModelWorkloadRow(
                model_id=model.id, workload_id=workload.id, kind="conv", op="Conv",
                description={"task": "fused_conv", "shape": "1x3x8x8"}, onnx_nodes=["c0"],
                occurrences=1, flops=2e6, position=0,
            )
        )  # fmt: skip
        for i, (mean, error) in enumerate(
            [(2e-5, None), (None, "build failed: x"), (1e-5, None), (None, "LocalRunner: boom")]
        ):
            session.add(
                TuningRecordRow(
                    workload_id=workload.id, trace=[[], []], mean_sec=mean,
                    gflops=2e6 / mean / 1e9 if mean else None, error=error, trial_index=i,
                    created_at=start + timedelta(seconds=i),
                )
            )  # fmt: skip
        session.add(
            ArtifactRow(
                model_id=model.id, target_id=target.id, sha256="a" * 64, path="/x.so",
                manifest={}, verified=True,
                profile=[
                    {"layer": "fused_conv", "op": "Conv", "ms": 0.012, "ort_ms": 0.010},
                    {"layer": "(onnxruntime: other nodes)", "op": "", "ms": None, "ort_ms": 0.002},
                ],
                bench={"results": {
                    "tuned": {"median_ms": 0.02, "time_vs_ort": 1.1},
                    "untuned": {"median_ms": 0.5},
                    "onnxruntime": {"median_ms": 0.018},
                }},
            )
        )  # fmt: skip
        return model.id, workload.id


@pytest.mark.parametrize("peak", [100.0, None])
def test_layer_page_reads_profile_bench_errors_and_peak(db_engine, peak: float | None) -> None:
    model_id, workload_id = _seed(db_engine, peak=peak)
    with Session(db_engine) as session:
        view = layer_page(session, session.get(ModelRow, model_id), None)
        [overview] = models_overview(session, offset=0, limit=10)
        detail = layer_detail(session, workload_id, per_page=3)
    [row] = view["rows"]
    assert (row["trials"], row["build_errors"], row["run_errors"]) == (4, 1, 1)
    assert row["best_gflops"] == pytest.approx(200.0)
    assert row["pct_peak"] == (pytest.approx(200.0) if peak else None)
    assert row["ort_ms"] == 0.010 and row["share"] == 1.0 and view["profiled"]
    assert row["gap"] == pytest.approx(1.2) and row["profile_ms"] == 0.012
    split = {t["name"]: (t["kind"], t["y"]) for t in view["time_split"]["traces"]}
    assert split["fused_conv"] == ("Conv", [None, 0.012, 0.010, None])
    assert split["onnxruntime only"] == ("onnxruntime only", [None, None, 0.002, None])
    assert split["whole model (untuned, bench)"] == ("whole model", [0.5, None, None, None])
    assert view["top"]["labels"] == ["fused_conv"] and view["top"]["ort_ms"] == [0.010]
    assert view["bench"]["time_vs_ort"] == 1.1
    assert view["over_peak"] == bool(peak)  # 200 GFLOP/s against a stored 100: flagged
    # Whole-model convergence: the best-so-far steps of the one layer, at its trials' own times.
    [curve] = view["convergence"]["series"]
    assert curve["gflops"] == pytest.approx([100.0, 200.0, 200.0])
    assert curve["seconds"] == [0.0, 2.0, 3.0]
    assert (overview["best_ms"], overview["vs_ort"], overview["workloads"]) == (0.02, 1.1, 1)
    assert detail["trial_count"] == 4 and detail["failed_count"] == 2
    assert detail["scatter"]["failed"] == [False, True, False, True]
    assert detail["best_curve"]["gflops"] == pytest.approx([100.0, 200.0, 200.0])
    assert detail["table"]["pages"] == 2 and len(detail["table"]["rows"]) == 3
    assert detail["roofline"]["peak_gflops"] == peak


def test_the_layer_page_names_the_record_the_build_uses(db_engine) -> None:
    _, workload_id = _seed(db_engine, peak=None)
    with Session(db_engine) as session:
        assert layer_detail(session, workload_id)["built"] is None  # no confirmation yet
    with Session(db_engine) as session, session.begin():
        trials = session.scalars(
            select(TuningRecordRow)
            .where(
                TuningRecordRow.workload_id == workload_id, TuningRecordRow.mean_sec.is_not(None)
            )
            .order_by(TuningRecordRow.id)
        ).all()
        for i, row in enumerate(trials):
            row.trace = [[f"trial {i}"], []]
        slower = trials[0]  # 0.020 ms alone, against 0.010 for the fastest
        session.add(
            TuningRecordRow(
                workload_id=workload_id, trace=slower.trace, mean_sec=1.5e-5,
                run_secs=[1.4e-5, 1.5e-5, 1.6e-5], timing=Timing.CONFIRMED.value, space="s",
            )
        )  # fmt: skip
        session.flush()
        slower_id = slower.id
    with Session(db_engine) as session:
        built = layer_detail(session, workload_id)["built"]
    assert built["ms"] == pytest.approx(0.015) and built["rounds"] == 3
    assert (built["trial_record_id"], built["fastest_trial"]) == (slower_id, False)
    assert built["trial_ms"] == pytest.approx(0.020)
    # A trial after the confirmation may beat it: the build takes the fastest trial again.
    with Session(db_engine) as session, session.begin():
        session.add(
            TuningRecordRow(
                workload_id=workload_id, trace=[[], []], mean_sec=3e-5,
                timing=CURRENT_TIMING.value,
            )
        )  # fmt: skip
    with Session(db_engine) as session:
        assert layer_detail(session, workload_id)["built"] is None


def test_without_a_profile_no_share_is_made_up(db_engine) -> None:
    """Tuning's single-kernel times are not shares of an inference: no profile, no shares."""
    model_id, _ = _seed(db_engine, peak=100.0)
    with Session(db_engine) as session, session.begin():
        for artifact in session.query(ArtifactRow):
            artifact.profile = None
    with Session(db_engine) as session:
        view = layer_page(session, session.get(ModelRow, model_id), None)
    [row] = view["rows"]
    assert row["tuned_ms"] is not None  # tuning did measure the kernel...
    assert row["share"] is None and row["gap"] is None and not view["profiled"]  # ...no share
    assert view["top"]["labels"] == []
    assert view["time_split"]["source"].startswith("nothing yet")
    # The bench still gives whole-model segments.
    names = {t["name"] for t in view["time_split"]["traces"]}
    assert "whole model (tuned, bench)" in names


def test_job_progress_text() -> None:
    from convtune.db.models import JobRow
    from convtune.service.dashboard.views import _progress_text

    now = datetime.now(UTC)
    running = JobRow(options={"budget_minutes": 10}, started_at=now - timedelta(seconds=60))
    text = _progress_text(running, 2, 8)
    assert text is not None and text.startswith("elapsed 1:0")
    assert "budget left 8:5" in text or "budget left 9:00" in text
    assert "ETA 3:0" in text or "ETA 2:59" in text  # 2 trials a minute, 6 to go
    done = JobRow(options={}, started_at=now - timedelta(seconds=90), finished_at=now)
    assert _progress_text(done, 8, 8) == "ran 1:30"
    assert _progress_text(JobRow(options={}), 0, 8) is None


def test_the_pages_say_where_the_build_fell_back_and_the_gap_to_onnxruntime(db_engine) -> None:
    """The model page lists the job's fallbacks (one line each) and its check against
    onnxruntime; the layer page lists the spaces its search left out."""
    model_id, workload_id = _seed(db_engine, peak=None)
    dropped = {
        "space": "winograd-nchwc", "task": "fused_conv", "task_index": 0,
        "reason": "The block is only allowed to read a single buffer region",
        "message": "space winograd-nchwc dropped for task fused_conv: The block is only ...",
    }  # fmt: skip
    check = {"ratio": 1.4, "message": "0.020 ms against onnxruntime's 0.014 ms", "gaps": [{}]}
    with Session(db_engine) as session, session.begin():
        artifact = session.scalars(select(ArtifactRow)).one()
        artifact.manifest = {
            "dropped_spaces": [dropped],
            "build_fallback": "every conv direct",
            "peer_check": check,
            "layers": [
                {"workload_id": workload_id, "dropped_spaces": [
                    {"space": dropped["space"], "reason": dropped["reason"]}
                ]},
                {"workload_id": workload_id + 1, "dropped_spaces": [
                    {"space": "generic", "reason": "another layer's"}
                ]},
            ],
        }  # fmt: skip
    with Session(db_engine) as session:
        view = layer_page(session, session.get(ModelRow, model_id), None)
        detail = layer_detail(session, workload_id)
    assert view["notes"]["fallbacks"] == [dropped["message"], "built with every conv direct"]
    assert view["notes"]["peer_check"]["ratio"] == 1.4
    assert detail["dropped_spaces"] == [f"winograd-nchwc: {dropped['reason']}"]
