"""The cost model of a target: XGBoost trained on every measurement the database holds for it.

MetaSchedule's per-store features describe a candidate's loop nest and memory accesses, not the
workload it came from, so a model trained on the records of other convolutions ranks the
candidates of a new one (TenSet's transfer). Labels are normalised per workload, as XGBModel
does: each record scores ``best time of its workload / its time`` (1 for the fastest).

- **Sample.** Per workload, its ``TOP_PER_WORKLOAD`` fastest records and ``RANDOM_PER_WORKLOAD``
  drawn uniformly from all of them (``RecordRepository.sample_records``, one query): the fast ones
  teach where the peak is, the random ones what a bad schedule looks like; the top records alone
  all score close to 1 and teach no ranking.
- **Cap.** ``MAX_RECORDS`` in all: feature extraction (trace replay) and XGBoost training grow
  with it, and both run before the first trial of a job. Past the cap the model is retrained from
  a fresh sample instead of growing.
- **Persistence.** One row per target in ``cost_models``: the bytes of ``XGBModel.save`` (booster
  and feature groups), the code version that trained it, how many records and workloads it
  has seen and the highest record id. ``warm`` loads it and adds the records recorded since;
  ``refresh`` does the same and saves (called after each search). A model saved by another
  version (or one that fails to load) is retrained from the records, never trusted.
"""

from __future__ import annotations

import os
import tempfile
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import groupby
from typing import Any

import numpy as np
from sqlalchemy import select
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.cost_model import XGBModel
from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
from tvm.s_tir.meta_schedule.runner import RunnerResult
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

from convtune.db.models import CostModelRow, TuningRecordRow, utcnow
from convtune.db.ms_database import SQLDatabase
from convtune.db.session import session_factory
from convtune.tuner.code_version import code_version

# Bump when features, labels or sampling change: a saved model of another format is retrained.
COST_MODEL_FORMAT = 1
TOP_PER_WORKLOAD = 32
RANDOM_PER_WORKLOAD = 64
MAX_RECORDS = 4096
# During a search: retrain after this many new trials. XGBModel's own rule (retrain when the data
# grew by 20%) would wait ~800 trials on a warm model of 4096 records, and the new workload's
# measurements would never reach the booster.
RETRAIN_EVERY = 32
# Records a model must have seen before its predictions replace random scores (XGBModel's
# warm-up): a few batches' worth, as the search configured it before.
WARMUP_SAMPLES = 16


def trainer_version() -> str:
    """What a saved model is checked against: the code version and the model format."""
    return f"{code_version()}/cm{COST_MODEL_FORMAT}"


def new_model(*, seed: int, threads: int) -> XGBModel:
    """An empty XGBoost cost model as the search uses it."""
    return XGBModel(
        config=XGBConfig(seed=seed, nthread=threads),
        num_warmup_samples=WARMUP_SAMPLES,
        num_tuning_cores=threads,
        verbose_eval=0,
    )


@dataclass
class WarmModel:
    """A cost model and what it was trained on."""

    model: XGBModel
    records: int  # records in the model's training data
    workloads: int  # feature groups (one per workload)
    added: int  # records added by this call (0: loaded as saved)
    last_record_id: int  # highest tuning_records.id the model has seen
    source: str  # "empty", "trained", "loaded", "updated" or "retrained (…)"
    seconds: float = 0.0

    def as_event(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "workloads": self.workloads,
            "added": self.added,
            "source": self.source,
            "seconds": round(self.seconds, 2),
        }


def model_bytes(model: XGBModel) -> bytes:
    """``XGBModel.save`` as bytes (zlib: the float32 features compress ~3×)."""
    with tempfile.TemporaryDirectory(prefix="convtune-cm-") as tmp:
        path = os.path.join(tmp, "model.tar")
        model.save(path)
        with open(path, "rb") as f:
            return zlib.compress(f.read(), 3)


def model_from_bytes(data: bytes, *, seed: int, threads: int) -> XGBModel:
    model = new_model(seed=seed, threads=threads)
    with tempfile.TemporaryDirectory(prefix="convtune-cm-") as tmp:
        path = os.path.join(tmp, "model.tar")
        with open(path, "wb") as f:
            f.write(zlib.decompress(data))
        model.load(path)
    # XGBModel.load leaves the adaptive-training mark at 0; the booster is trained on all of it.
    model.last_train_size = model.data_size
    return model


def fit(model: XGBModel) -> None:
    """Train ``model``'s booster once on all its feature groups.

    The same labels as ``XGBModel.update`` (each group normalised by its fastest record), but one
    training for a whole warm start instead of one per workload added.
    """
    groups = list(model.data.values())
    if not groups:
        return
    features = [f for g in groups for f in g.features]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.concatenate(
            [
                np.divide(g.min_cost, g.costs, out=np.zeros_like(g.costs), where=g.costs != 0)
                for g in groups
            ]
        )
    model._train(xs=features, ys=ratios)
    model.last_train_size = model.data_size


class CostModelStore:
    """The persisted cost model of ``database``'s target."""

    def __init__(
        self,
        database: SQLDatabase,
        *,
        seed: int = 0,
        threads: int = 1,
        top_k: int = TOP_PER_WORKLOAD,
        random_k: int = RANDOM_PER_WORKLOAD,
        max_records: int = MAX_RECORDS,
    ) -> None:
        self.database = database
        self.seed = seed
        self.threads = threads
        self.top_k = top_k
        self.random_k = random_k
        self.max_records = max_records
        self._sessions = session_factory(database.records.engine)
        self._contexts: dict[int, ms.TuneContext] = {}

    # ----- persistence --------------------------------------------------------------------

    def saved(self) -> CostModelRow | None:
        query = select(CostModelRow).where(
            CostModelRow.target_id == self.database.records.target_id
        )
        with self._sessions() as session:
            return session.scalar(query)

    def save(self, warm: WarmModel) -> None:
        """Store ``warm`` as this target's model (replacing the saved one)."""
        if warm.model.booster is None:
            return  # Nothing learned yet; XGBModel.load cannot read a model without a booster.
        data = model_bytes(warm.model)
        query = select(CostModelRow).where(
            CostModelRow.target_id == self.database.records.target_id
        )
        with self._sessions() as session, session.begin():
            row = session.scalar(query.with_for_update())
            if row is None:
                row = CostModelRow(target_id=self.database.records.target_id)
                session.add(row)
            row.convtune_version = trainer_version()
            row.record_count = warm.records
            row.workload_count = warm.workloads
            row.last_record_id = warm.last_record_id
            row.model = data
            row.updated_at = utcnow()

    # ----- training -----------------------------------------------------------------------

    def warm(self) -> WarmModel:
        """The target's model, brought up to date with every record; not saved."""
        start = time.perf_counter()
        upto = self.database.records.max_record_id()
        row = self.saved()
        model: XGBModel | None = None
        source = "trained"
        after = 0
        if row is not None and row.convtune_version != trainer_version():
            source = f"retrained (saved by {row.convtune_version})"
        elif row is not None:
            try:
                model = model_from_bytes(row.model, seed=self.seed, threads=self.threads)
                after = row.last_record_id
                source = "loaded"
            except Exception as exc:  # A corrupt or unreadable model is retrained.
                source = f"retrained (could not load: {type(exc).__name__})"
        if model is not None and model.data_size >= self.max_records:
            model, after, source = None, 0, "retrained (over the record cap)"
        if model is None:
            model = new_model(seed=self.seed, threads=self.threads)
            after = 0
        rows = (
            self.database.records.sample_records(
                top_k=self.top_k,
                random_k=self.random_k,
                after_id=after,
                upto_id=upto,
                seed=self.seed,
            )
            if upto > after
            else []
        )
        rows = self._within_cap(rows, self.max_records - model.data_size)
        added = self.add_records(model, rows)
        if added:
            fit(model)
            if source == "loaded":
                source = "updated"
        elif model.booster is None:
            source = "empty"
        return WarmModel(
            model=model,
            records=int(model.data_size),
            workloads=len(model.data),
            added=added,
            last_record_id=upto,
            source=source,
            seconds=time.perf_counter() - start,
        )

    def refresh(self) -> WarmModel:
        """``warm``, then saved: after a search, the model learns what it measured."""
        warm = self.warm()
        if warm.added or warm.source != "loaded":
            self.save(warm)
        return warm

    def _within_cap(self, rows: list[TuningRecordRow], room: int) -> list[TuningRecordRow]:
        """At most ``room`` rows: an equal number per workload (as far as each has them),
        spread evenly over its range of run times, its fastest (the normaliser) first."""
        if len(rows) <= room:
            return rows
        if room <= 0:
            return []
        groups = [
            sorted(group, key=lambda r: r.mean_sec or 0.0)
            for _, group in groupby(rows, key=lambda r: r.workload_id)
        ]
        quota = [0] * len(groups)
        left = room
        while left > 0 and any(q < len(g) for q, g in zip(quota, groups, strict=True)):
            for i, group in enumerate(groups):
                if left > 0 and quota[i] < len(group):
                    quota[i] += 1
                    left -= 1
        kept: list[TuningRecordRow] = []
        for group, q in zip(groups, quota, strict=True):
            if q == 1:
                kept.append(group[0])
            elif q > 1:
                kept.extend(group[round(j * (len(group) - 1) / (q - 1))] for j in range(q))
        return kept

    def context(self, workload_id: int) -> ms.TuneContext:
        """A tuning context for a stored workload: what feature extraction needs."""
        if workload_id not in self._contexts:
            workload = self.database.records.workload(workload_id)
            self._contexts[workload_id] = ms.TuneContext(
                mod=workload.mod,
                target=self.database.records.target,
                task_name=f"workload-{workload_id}",
                num_threads=self.threads,
            )
        return self._contexts[workload_id]

    def add_records(self, model: XGBModel, rows: Iterable[TuningRecordRow]) -> int:
        """Add stored records to ``model``'s training data (no training); returns how many.

        Records whose trace no longer replays on their workload are skipped.
        """
        added = 0
        saved_mark = model.last_train_size
        # XGBModel.update trains after adding unless the data grew by < 20% since the last
        # training: an "infinite" mark makes every update only add; ``fit`` trains once.
        model.last_train_size = 1 << 62
        try:
            for workload_id, group in groupby(rows, key=lambda r: r.workload_id):
                candidates, results = [], []
                for row in group:
                    try:
                        record = self.database.records.tuning_record(row)
                        candidates.append(record.as_measure_candidate())
                    except Exception:  # A trace of an older space that no longer applies.
                        continue
                    results.append(RunnerResult(run_secs=row.run_secs, error_msg=None))
                if candidates:
                    before = model.data_size
                    model.update(self.context(workload_id), candidates, results)
                    added += model.data_size - before
        finally:
            model.last_train_size = saved_mark
        return added


@derived_object
class TrainCadence(PyMeasureCallback):
    """Makes the next ``UpdateCostModel`` retrain once ``every`` trials were measured since the
    last training, or sooner while the model is small (XGBModel's rule: the data grew by 20%).

    Must run before ``UpdateCostModel`` in the measure callbacks.
    """

    def __init__(self, model: XGBModel, every: int = RETRAIN_EVERY) -> None:
        super().__init__()
        self.model = model
        self.every = every
        self.pending = 0

    def apply(
        self,
        task_scheduler: ms.TaskScheduler,
        task_id: int,
        measure_candidates: list[MeasureCandidate],
        builder_results: list[ms.builder.BuilderResult],
        runner_results: list[RunnerResult],
    ) -> None:
        self.pending += len(measure_candidates)
        size = self.model.data_size + len(measure_candidates)
        if self.pending >= min(self.every, size // 5):
            self.model.last_train_size = 0  # XGBModel.update trains when data grew by >= 20%.
            self.pending = 0
        else:
            self.model.last_train_size = 1 << 62
