"""The queries the cost model and the search plan use, and the cost_models table, on both SQLs."""

from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import select

from convtune.db.models import CostModelRow, ModelRow, ModelWorkloadRow
from convtune.db.ms_database import SQLDatabase
from convtune.db.session import session_factory

from .tir_helpers import OTHER_TARGET, TARGET, args_info, matmul, tiled_schedule


def _fill(db: SQLDatabase, sizes: dict[int, int], failed: int = 1) -> dict[int, int]:
    """``sizes[n]`` successful trials (k-th takes (k+1) ms) and ``failed`` failed ones for
    ``matmul(n)``; returns workload id -> n."""
    ids = {}
    for n, count in sizes.items():
        mod = matmul(n)
        wid = db.records.workload_id(mod)
        ids[wid] = n
        common = {
            "trace_json": tiled_schedule(mod).trace.as_json(),
            "args_info_json": [a.as_json() for a in args_info(mod)],
            "space": "test",
            "job_id": None,
            "trial_index": None,
            "flops": None,
        }
        # Inserted slowest first: "fastest" and "earliest" differ.
        for k in reversed(range(count)):
            db.records.record_trial(wid, run_secs=[(k + 1) * 1e-3], error=None, **common)
        for _ in range(failed):
            db.records.record_trial(wid, run_secs=None, error="build failed", **common)
    return ids


def test_sample_records_takes_top_k_and_a_seeded_random_draw_per_workload(db_engine):
    db = SQLDatabase(db_engine, TARGET)
    ids = _fill(db, {16: 20, 24: 3, 32: 12})
    other = SQLDatabase(db_engine, OTHER_TARGET)
    _fill(other, {16: 5})  # another target's records are never sampled

    rows = db.records.sample_records(top_k=2, random_k=4, seed=1)
    per_workload = Counter(r.workload_id for r in rows)
    assert set(per_workload) == set(ids)
    by_n = {ids[wid]: count for wid, count in per_workload.items()}
    assert by_n[24] == 3  # fewer records than asked: all of them
    assert 4 <= by_n[16] <= 6 and 4 <= by_n[32] <= 6
    assert all(r.mean_sec is not None for r in rows)  # failed trials are never sampled
    for wid in ids:
        times = sorted(r.mean_sec for r in rows if r.workload_id == wid)
        assert times[:2] == [1e-3, 2e-3]  # the two fastest are always in
    # Ordered by workload then id; the same seed gives the same sample, another seed another.
    assert [(r.workload_id, r.id) for r in rows] == sorted((r.workload_id, r.id) for r in rows)
    again = db.records.sample_records(top_k=2, random_k=4, seed=1)
    assert [r.id for r in again] == [r.id for r in rows]
    draws = {
        tuple(r.id for r in db.records.sample_records(top_k=0, random_k=4, seed=s))
        for s in range(4)
    }
    assert len(draws) > 1

    # Only the records after a watermark, up to another.
    top = db.records.max_record_id()
    assert top == (20 + 1) + (3 + 1) + (12 + 1)  # the last one, a failed trial, counts too
    assert other.records.max_record_id() > top  # filled after, on its own target
    middle = sorted(r.id for r in rows)[len(rows) // 2]
    newer = db.records.sample_records(top_k=100, random_k=0, after_id=middle, upto_id=top)
    assert newer and all(middle < r.id <= top for r in newer)


def test_best_gflops_by_workload_names_the_task_kind(db_engine):
    db = SQLDatabase(db_engine, TARGET)
    ids = _fill(db, {16: 3, 32: 2})
    by_n = {n: wid for wid, n in ids.items()}
    with session_factory(db_engine)() as session, session.begin():
        model = ModelRow(
            sha256="0" * 64, name="m", size_bytes=1, path="", input_shapes={}, inputs=[], outputs=[]
        )
        session.add(model)
        session.flush()
        session.add(
            ModelWorkloadRow(
                model_id=model.id,
                workload_id=by_n[16],
                kind="gemm",
                op="MatMul",
                description={},
                onnx_nodes=[],
                flops=1.0,
                position=0,
            )
        )
    best = db.records.best_gflops_by_workload()
    assert best[by_n[16]] == (  # fastest trial: 1 ms
        "gemm",
        pytest.approx(2 * 16**3 / 1e-3 / 1e9),
    )
    assert best[by_n[32]][0] is None  # a workload of no model task


def test_cost_model_row_holds_bytes_per_target(db_engine):
    db = SQLDatabase(db_engine, TARGET)
    blob = bytes(range(256)) * 1000
    with session_factory(db_engine)() as session, session.begin():
        session.add(
            CostModelRow(
                target_id=db.records.target_id,
                convtune_version="x",
                record_count=3,
                workload_count=1,
                last_record_id=9,
                model=blob,
            )
        )
    with session_factory(db_engine)() as session:
        row = session.scalar(select(CostModelRow))
        assert row is not None
        assert (row.model, row.record_count, row.last_record_id) == (blob, 3, 9)
        assert row.updated_at.tzinfo is not None
