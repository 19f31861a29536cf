"""SQLDatabase: MetaSchedule's database contract on SQLite and PostgreSQL with real TIR."""

from __future__ import annotations

import json
import threading

import pytest
import tvm
import tvm_ffi
from sqlalchemy import func, select
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

from convtune.db.models import CURRENT_TIMING, TargetRow, Timing, TuningRecordRow, WorkloadRow
from convtune.db.ms_database import SQLDatabase, mean_run_sec, target_key
from convtune.db.records import RecordRepository
from convtune.db.session import make_engine, session_factory

from .tir_helpers import OTHER_TARGET, TARGET, args_info, matmul, tiled_schedule

FLOPS_64 = 2 * 64**3


def _count(engine, model) -> int:
    with session_factory(engine)() as session:
        return session.scalar(select(func.count()).select_from(model))


def _record(db, mod, run_secs, inner: int = 8) -> TuningRecord:
    workload = db.commit_workload(mod)
    return TuningRecord(
        tiled_schedule(mod, inner=inner).trace,
        workload,
        run_secs=run_secs,
        target=TARGET,
        args_info=args_info(mod),
    )


def _secs(record: TuningRecord) -> list[float]:
    return [float(v.value) for v in record.run_secs]


def test_target_key_is_canonical_and_distinguishes_targets():
    key = target_key(TARGET)
    assert json.loads(key)["num-cores"] == 2
    assert key == json.dumps(json.loads(key), sort_keys=True, separators=(",", ":"))
    assert target_key(tvm.target.Target(TARGET.export())) == key
    assert target_key(OTHER_TARGET) != key


def test_mean_run_sec_treats_failure_stand_in_as_failed():
    assert mean_run_sec(None) is None
    assert mean_run_sec([]) is None
    assert mean_run_sec([1e10, 1e10]) is None
    assert mean_run_sec([1e-4, 3e-4]) == pytest.approx(2e-4)


def test_workload_round_trip_through_a_new_engine(db_engine, db_url):
    mod = matmul(64)
    first = SQLDatabase(db_engine, TARGET)
    assert not first.has_workload(mod)
    committed = first.commit_workload(mod)
    workload_id = first.records.workload_id(mod)

    other_engine = make_engine(db_url)
    try:
        second = SQLDatabase(other_engine, TARGET)
        assert second.records.target_id == first.records.target_id
        assert second.has_workload(matmul(64))  # Built anew: equal by structure, not identity.
        loaded = second.commit_workload(matmul(64))
        assert tvm_ffi.structural_equal(loaded.mod, committed.mod)
        assert second.records.workload_id(mod) == workload_id
        assert tvm_ffi.structural_equal(second.records.workload(workload_id).mod, mod)
    finally:
        other_engine.dispose()
    assert _count(db_engine, WorkloadRow) == 1
    with session_factory(db_engine)() as session:
        row = session.get(WorkloadRow, workload_id)
        assert row.shash == str(tvm_ffi.structural_hash(mod))
        assert row.task_name == "main"
        assert row.flops == FLOPS_64
        assert row.created_at.tzinfo is not None and row.created_at.utcoffset().total_seconds() == 0


def test_dedup_by_structure_and_hash_collisions(db_engine):
    db = SQLDatabase(db_engine, TARGET)
    a = db.records.workload_id(matmul(64))
    assert db.records.workload_id(matmul(64)) == a
    db.commit_workload(matmul(64))
    assert _count(db_engine, WorkloadRow) == 1
    b = db.records.workload_id(matmul(32))
    assert b != a
    assert _count(db_engine, WorkloadRow) == 2

    # A forged hash collision: a row with the hash of matmul(16) holding another module.
    # Equal hashes are only candidates; the adapter must compare structures.
    collide = matmul(16)
    with session_factory(db_engine)() as session, session.begin():
        session.add(
            WorkloadRow(
                target_id=db.records.target_id,
                shash=str(tvm_ffi.structural_hash(collide)),
                task_name="impostor",
                mod_json=tvm.ir.save_json(matmul(8)),
            )
        )
    fresh = SQLDatabase(db_engine, TARGET)
    assert not fresh.has_workload(collide)
    c = fresh.records.workload_id(collide)
    assert tvm_ffi.structural_equal(fresh.records.workload(c).mod, collide)
    assert _count(db_engine, WorkloadRow) == 4


def test_workloads_are_per_target(db_engine):
    mine = SQLDatabase(db_engine, TARGET)
    theirs = SQLDatabase(db_engine, OTHER_TARGET)
    mod = matmul(64)
    mine.commit_tuning_record(_record(mine, mod, [1e-4]))
    assert not theirs.has_workload(mod)
    assert len(mine) == 1 and len(theirs) == 0
    assert theirs.records.workload_id(mod) != mine.records.workload_id(mod)
    assert _count(db_engine, TargetRow) == 2
    with pytest.raises(KeyError):
        theirs.records.workload(mine.records.workload_id(mod))


def test_records_timed_another_way_are_invisible_and_the_workload_is_tuned_again(db_engine):
    assert CURRENT_TIMING is Timing.COLD_WEIGHTS
    warm = SQLDatabase(db_engine, TARGET, timing=Timing.WARM)
    cold = SQLDatabase(db_engine, TARGET)
    mod = matmul(64)
    wid = warm.records.workload_id(mod)
    warm.commit_tuning_record(_record(warm, mod, [1e-5], inner=8))  # warm: looks faster
    cold.commit_tuning_record(_record(cold, mod, [3e-5], inner=16))
    with session_factory(db_engine)() as session:
        stored = session.scalars(select(TuningRecordRow.timing).order_by(TuningRecordRow.id))
        assert list(stored) == ["warm", "cold-weights"]
    # Each sees its own record only: best, counts, the traces it will not measure again, samples.
    assert _secs(cold.get_top_k(cold.commit_workload(mod), 5)[0]) == [3e-5]
    assert cold.records.best_record(wid).mean_sec == pytest.approx(3e-5)
    assert warm.records.best_record(wid).mean_sec == pytest.approx(1e-5)
    assert cold.records.count_trials(wid) == 1 and len(cold) == 1 and len(warm) == 1
    assert cold.records.trace_keys(wid) != warm.records.trace_keys(wid)
    assert [r.mean_sec for r in cold.records.sample_records(top_k=5, random_k=5)] == [
        pytest.approx(3e-5)
    ]
    assert cold.records.best_gflops_by_workload()[wid][1] == pytest.approx(FLOPS_64 / 3e-5 / 1e9)
    assert cold.records.max_record_id() > warm.records.max_record_id()
    fresh = SQLDatabase(db_engine, TARGET, timing=Timing.COLD_WEIGHTS)
    assert fresh.query_tuning_record(mod, TARGET, "main").run_secs[0].value == pytest.approx(3e-5)


def test_top_k_orders_successes_by_mean_time_then_insertion(db_engine):
    db = SQLDatabase(db_engine, TARGET)
    mod = matmul(64)
    workload = db.commit_workload(mod)
    committed = [
        ([3e-4], 4),
        ([1e-4], 8),  # ties with the split by 16 below: the earlier id comes first
        ([1e10], 8),  # MetaSchedule's stand-in for a failed build or run
        (None, 8),
        ([1e-4], 16),
        ([2e-4], 32),
    ]
    for run_secs, inner in committed:
        db.commit_tuning_record(_record(db, mod, run_secs, inner))

    assert len(db) == 6
    assert len(db.get_all_tuning_records()) == 6
    top = db.get_top_k(workload, 3)
    assert [_secs(r) for r in top] == [
        pytest.approx([1e-4]),
        pytest.approx([1e-4]),
        pytest.approx([2e-4]),
    ]
    # The tie is broken by insertion: the split by 8 was committed before the split by 16.
    assert "factors=[None, 8]" in str(top[0].trace)
    assert "factors=[None, 16]" in str(top[1].trace)
    assert len(db.get_top_k(workload, 100)) == 4
    assert db.get_top_k(workload, 0) == []
    assert db.get_top_k(db.commit_workload(matmul(32)), 5) == []

    best = db.records.best_record(db.records.workload_id(mod))
    assert best.mean_sec == pytest.approx(1e-4)
    assert best.gflops == pytest.approx(FLOPS_64 / 1e-4 / 1e9)
    with session_factory(db_engine)() as session:
        failed = session.scalars(
            select(TuningRecordRow).where(TuningRecordRow.mean_sec.is_(None))
        ).all()
    assert len(failed) == 2 and all(row.error for row in failed)
    assert sorted(str(row.run_secs) for row in failed) == ["None", "[10000000000.0]"]


def test_records_written_elsewhere_are_seen_by_a_live_instance(db_engine, db_url):
    reader = SQLDatabase(db_engine, TARGET)
    mod = matmul(64)
    workload = reader.commit_workload(mod)
    assert reader.get_top_k(workload, 1) == []
    other_engine = make_engine(db_url)
    try:
        writer = SQLDatabase(other_engine, TARGET)
        writer.commit_tuning_record(_record(writer, mod, [7e-5]))
    finally:
        other_engine.dispose()
    assert [_secs(r) for r in reader.get_top_k(workload, 1)] == [[7e-5]]


def test_record_trial_and_count_trials(db_engine):
    db = SQLDatabase(db_engine, TARGET)
    mod = matmul(64)
    workload_id = db.records.workload_id(mod)
    trace = tiled_schedule(mod).trace.as_json()
    info = [a.as_json() for a in args_info(mod)]
    common = {"trace_json": trace, "args_info_json": info, "space": "test", "job_id": 7}

    ok = db.records.record_trial(
        workload_id, run_secs=[1e-4, 3e-4], error=None, trial_index=0, flops=1e6, **common
    )
    derived = db.records.record_trial(
        workload_id, run_secs=[5e-4], error=None, trial_index=1, flops=None, **common
    )
    db.records.record_trial(
        workload_id,
        run_secs=[1e-5],
        error="verification failed",
        trial_index=2,
        flops=None,
        **common,
    )
    db.records.record_trial(
        workload_id, run_secs=None, error="build timed out", trial_index=3, flops=None, **common
    )
    assert db.records.count_trials(workload_id) == 4
    assert db.records.count_trials(db.records.workload_id(matmul(32))) == 0

    with session_factory(db_engine)() as session:
        row = session.get(TuningRecordRow, ok)
        assert row.mean_sec == pytest.approx(2e-4)
        assert row.gflops == pytest.approx(1e6 / 2e-4 / 1e9)
        assert (row.space, row.job_id, row.trial_index) == ("test", 7, 0)
        assert row.target == json.loads(target_key(TARGET))
        assert session.get(TuningRecordRow, derived).gflops == pytest.approx(FLOPS_64 / 5e-4 / 1e9)
    best = db.records.best_record(workload_id)
    assert best.id == ok  # the erroneous 1e-5 trial never counts as the best
    [record] = db.get_top_k(db.records.workload(workload_id), 1)
    assert _secs(record) == pytest.approx([1e-4, 3e-4])
    with pytest.raises(KeyError):
        db.records.record_trial(
            10_000, run_secs=[1.0], error=None, trial_index=None, flops=None, **common
        )


def test_query_schedule_replays_the_stored_trace(db_engine, db_url):
    mod = matmul(64)
    db = SQLDatabase(db_engine, TARGET)
    assert db.query_schedule(mod, TARGET, "main") is None
    original = tiled_schedule(mod, inner=16, seed=5)
    db.commit_tuning_record(
        TuningRecord(original.trace, db.commit_workload(mod), [1e-4], TARGET, args_info(mod))
    )

    other_engine = make_engine(db_url)
    try:
        fresh = SQLDatabase(other_engine, TARGET)
        sch = fresh.query_schedule(matmul(64), TARGET, "main")
        record = fresh.query_tuning_record(matmul(64), TARGET, "main")
        ir_mod = fresh.query_ir_module(matmul(64), TARGET, "main")
        # The same queries through TVM's C++ Database interface (what compile_relax uses).
        via_ffi = fresh.query(matmul(64), TARGET, workload_name="main", kind="ir_module")
    finally:
        other_engine.dispose()
    replay = Schedule(mod)
    record.trace.apply_to_schedule(replay, remove_postproc=False)
    assert tvm_ffi.structural_equal(sch.mod, original.mod)
    assert tvm_ffi.structural_equal(sch.mod, replay.mod)
    assert tvm_ffi.structural_equal(ir_mod, original.mod)
    assert tvm_ffi.structural_equal(via_ffi, original.mod)
    assert not tvm_ffi.structural_equal(sch.mod, mod)  # the schedule really changed the loops
    # The sampled tile sizes (decisions) survived storage.
    assert str(sch.trace) == str(original.trace)


def test_a_trace_measured_on_a_twin_replays_on_the_twin(db_engine):
    """Two functions equal but for their block names (FuseTIR numbers fused blocks per model)
    share one workload row; each one's trace names its own blocks. A build of either gets a
    record that replays on it, and no query raises (EfficientNet-B0's build died on this)."""
    first, twin = matmul(64), matmul(64, name="D")
    db = SQLDatabase(db_engine, TARGET)
    for mod, name, secs in ((first, "C", 2e-4), (twin, "D", 1e-4)):
        trace = tiled_schedule(mod, name=name).trace
        db.commit_tuning_record(
            TuningRecord(trace, db.commit_workload(mod), [secs], TARGET, args_info(mod))
        )
    assert db.records.workload_id(first) == db.records.workload_id(twin)
    assert _count(db_engine, WorkloadRow) == 1

    # The twin's own (faster) record; the first function's, whose trace names block "C".
    assert _secs(db.query_tuning_record(twin, TARGET, "main")) == [1e-4]
    assert _secs(db.query_tuning_record(first, TARGET, "main")) == [2e-4]
    for mod in (first, twin):
        sch = db.query_schedule(mod, TARGET, "main")
        assert sch is not None and not tvm_ffi.structural_equal(sch.mod, mod)
    # Searching the twin, both replay (the first's on the stored function, which it names);
    # without a function to try, only the trace that fits the stored one.
    searched = db.get_top_k(Workload(twin), 5)
    assert [_secs(r) for r in searched] == [[1e-4], [2e-4]]
    assert [_secs(r) for r in db.get_all_tuning_records()] == [[2e-4]]


def test_only_structural_equality_is_supported(db_engine):
    with pytest.raises(ValueError, match="structural"):
        SQLDatabase(db_engine, TARGET, module_equality="anchor-block")


def test_concurrent_commits_of_one_module_store_one_row(db_engine, db_url):
    """Writers that all miss the workload at once must still store it once (target row lock)."""
    writers = 4
    engines = [make_engine(db_url) for _ in range(writers)]
    barrier = threading.Barrier(writers)
    ids: list[int] = []
    errors: list[BaseException] = []

    def commit(engine) -> None:
        try:
            db = SQLDatabase(engine, TARGET)
            mod = matmul(48)
            barrier.wait()
            ids.append(db.records.workload_id(mod))
        except BaseException as exc:  # surfaced below; a thread cannot fail the test itself
            errors.append(exc)

    threads = [threading.Thread(target=commit, args=(engine,)) for engine in engines]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for engine in engines:
            engine.dispose()
    assert errors == []
    assert len(set(ids)) == 1 and len(ids) == writers
    assert _count(db_engine, WorkloadRow) == 1


def test_the_fastest_record_of_each_space_however_far_behind(db_engine):
    """Confirmation re-measures each space's best: a small space measured under load once."""
    db = SQLDatabase(db_engine, TARGET)
    mod = matmul(64)
    wid = db.records.workload_id(mod)
    info = [a.as_json() for a in args_info(mod)]

    def trial(inner: int, secs: float | None, space: str) -> int:
        trace = tiled_schedule(mod, inner=inner).trace.as_json()
        return db.records.record_trial(
            wid, trace_json=trace, run_secs=None if secs is None else [secs],
            args_info_json=info, error=None if secs else "failed", trial_index=None,
            space=space, job_id=1, flops=None,
        )  # fmt: skip

    trial(8, 1e-5, "generic")
    best = trial(16, 0.9e-5, "generic")
    small = trial(32, 9e-5, "int8-vnni")  # 10x behind: never within CONFIRM_WITHIN
    trial(4, None, "winograd-nchwc")  # no successful trial: nothing to confirm
    assert [r.id for r in db.records.fastest_records(wid, 3)][:2] == [best, best - 1]
    assert [r.id for r in db.records.fastest_records(wid, 3, space="int8-vnni")] == [small]
    assert [(r.id, r.space) for r in db.records.fastest_of_each_space(wid)] == [
        (best, "generic"),
        (small, "int8-vnni"),
    ]


def test_a_confirmation_is_chosen_by_the_build_until_a_newer_trial(db_engine):
    db = SQLDatabase(db_engine, TARGET)
    mod = matmul(64)
    wid = db.records.workload_id(mod)
    info = [a.as_json() for a in args_info(mod)]

    def trial(inner: int, secs: float) -> int:
        trace = tiled_schedule(mod, inner=inner).trace.as_json()
        return db.records.record_trial(
            wid, trace_json=trace, run_secs=[secs], args_info_json=info, error=None,
            trial_index=None, space="test", job_id=3, flops=None,
        )  # fmt: skip

    lucky, steady = trial(8, 1e-5), trial(16, 1.1e-5)
    assert db.records.chosen_record(wid).id == lucky and db.records.confirmed_record(wid) is None
    rows = db.records.fastest_records(wid, 2)
    # Side by side, the lucky one is the slower.
    db.records.record_confirmation(rows[0], [3e-5, 2.9e-5, 9e-5])
    db.records.record_confirmation(rows[1], [2e-5, 2.1e-5, 1.9e-5])
    chosen = db.records.chosen_record(wid)
    assert chosen.timing == Timing.CONFIRMED.value
    assert chosen.mean_sec == pytest.approx(2e-5)  # the median round
    assert chosen.trace == rows[1].trace and chosen.space == "test" and chosen.job_id == 3
    built = db.query_tuning_record(mod, TARGET, "main")
    assert str(built.trace) == str(tiled_schedule(mod, inner=16).trace)
    # The search and the cost model never see a confirmation.
    assert db.records.best_record(wid).id == lucky
    assert [r.id for r in db.records.fastest_records(wid, 5)] == [lucky, steady]
    assert db.records.count_trials(wid) == 2 and len(db) == 2
    assert len(db.records.sample_records(top_k=5, random_k=5)) == 2
    # A newer trial may beat what was confirmed: the fastest single measurement is back.
    newer = trial(32, 1.5e-5)
    assert db.records.confirmed_record(wid) is None
    assert db.records.chosen_record(wid).id == lucky
    assert newer > lucky
    with pytest.raises(ValueError):
        db.records.record_confirmation(rows[0], [])


def test_a_record_replays_on_the_function_its_trace_names_or_is_no_schedule(db_engine):
    # Twins share a workload row (stored: the first, block "C"); a trace names its own blocks.
    first, twin = matmul(64), matmul(64, name="D")
    db = SQLDatabase(db_engine, TARGET)
    wid = db.records.workload_id(first)
    assert db.records.workload_id(twin) == wid
    info = [a.as_json() for a in args_info(first)]
    common = {
        "run_secs": [1e-5], "args_info_json": info, "error": None, "trial_index": None,
        "space": "test", "job_id": None, "flops": None,
    }  # fmt: skip
    for mod, name in ((first, "C"), (twin, "D")):
        db.records.record_trial(
            wid, trace_json=tiled_schedule(mod, name=name).trace.as_json(), **common
        )
    on_first, on_twin = db.records.fastest_records(wid, 2)
    # A trace of the stored function replays on it, whichever function asks.
    for asking in (None, twin):
        sch = db.records.replayed_schedule(on_first, asking)
        assert tvm_ffi.structural_equal(sch.mod, tiled_schedule(first, name="C").mod)
    # The twin's trace replays on the twin only; with no function to try it is no schedule.
    sch = db.records.replayed_schedule(on_twin, twin)
    assert tvm_ffi.structural_equal(sch.mod, tiled_schedule(twin, name="D").mod)
    assert db.records.replayed_schedule(on_twin) is None


def test_the_adapter_and_a_repository_without_tvm_share_the_rows(db_engine):
    """Code that never hands the database to TVM builds the repository alone: it sees what the
    adapter committed, and the adapter sees its trials (one implementation, two ways in)."""
    db = SQLDatabase(db_engine, TARGET)
    repo = RecordRepository(db_engine, TARGET)
    assert repo.target_id == db.records.target_id
    mod = matmul(64)
    db.commit_tuning_record(_record(db, mod, [2e-4]))
    wid = repo.workload_id(mod)
    assert wid == db.records.find_workload(mod)
    assert repo.count_trials(wid) == 1 and repo.count_records() == len(db) == 1
    trace = tiled_schedule(mod, inner=4).trace.as_json()
    info = [a.as_json() for a in args_info(mod)]
    repo.record_trial(
        wid, trace_json=trace, run_secs=[1e-4], args_info_json=info, error=None, trial_index=0,
        space="s", job_id=None, flops=None,
    )  # fmt: skip
    [best] = db.get_top_k(db.commit_workload(mod), 1)
    assert _secs(best) == pytest.approx([1e-4])
    assert db.records.best_record(wid).id == repo.build_candidates(wid)[0].id
    assert repo.best_record(wid).gflops == pytest.approx(FLOPS_64 / 1e-4 / 1e9)
    assert db.query_tuning_record(mod, TARGET, "main") is not None
