"""A real MetaSchedule search writes its trials through SQLDatabase into the SQL tables."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from sqlalchemy import select
from tvm.s_tir import meta_schedule as ms

from convtune.db.migrate import upgrade
from convtune.db.models import TuningRecordRow, WorkloadRow
from convtune.db.ms_database import SQLDatabase
from convtune.db.session import make_engine, session_factory

from .tir_helpers import HOST_CPU, TARGET, matmul

TRIALS = 4


@pytest.mark.slow
def test_tune_tir_stores_trials_in_sql(tmp_path):
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    upgrade(url)
    engine = make_engine(url)
    try:
        mod = matmul(64)
        db = SQLDatabase(engine, TARGET)
        returned = ms.tune_tir(
            mod,
            TARGET,
            str(tmp_path / "work"),
            max_trials_global=TRIALS,
            num_trials_per_iter=TRIALS,
            # Builds share 2 cores with other test processes: the default 30 s can run out.
            builder=ms.builder.LocalBuilder(timeout_sec=180),
            database=db,
            seed=7,
            cost_model="random",  # the database is under test, not the XGBoost model
        )
        assert returned.same_as(db)

        with session_factory(engine)() as session:
            workloads = session.scalars(select(WorkloadRow)).all()
            records = session.scalars(select(TuningRecordRow)).all()
        assert len(workloads) == 1 and workloads[0].flops == 2 * 64**3
        assert 1 <= len(records) <= TRIALS
        assert all(r.workload_id == workloads[0].id for r in records)
        measured = [r for r in records if r.mean_sec is not None]
        assert measured, f"no candidate built and ran: {[(r.run_secs, r.error) for r in records]}"
        assert all(r.gflops > 0 and r.target["mcpu"] == HOST_CPU for r in measured)
        assert all(len(r.args_info) == 3 and r.trace for r in records)

        # A new instance reads the same best schedule back and it computes a matmul.
        best = SQLDatabase(engine, TARGET).query_ir_module(matmul(64), TARGET, "main")
        assert best is not None
        lib = tvm.compile(best, target=TARGET)
        rng = np.random.default_rng(0)
        a = rng.standard_normal((64, 64), dtype=np.float32)
        b = rng.standard_normal((64, 64), dtype=np.float32)
        dev = tvm.cpu()
        out = tvm.runtime.tensor(np.zeros((64, 64), np.float32), dev)
        lib["main"](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), out)
        np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)
    finally:
        engine.dispose()
