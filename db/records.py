"""The record repository: convtune's own reads and writes of workloads and tuning records.

TVM's MetaSchedule talks to :class:`convtune.db.ms_database.SQLDatabase`, a thin adapter of its
``Database`` interface; everything convtune asks of the same tables (record a trial or a
confirmation, the record a build uses, the fastest records, the cost model's sample, the search's
bookkeeping) is here, in one class with one implementation per question, so that the adapter and
our code cannot drift apart. See :class:`RecordRepository` for the contract.
"""

from __future__ import annotations

import json
import math
import statistics
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import tvm
import tvm_ffi
from sqlalchemy import BigInteger, Engine, Select, cast, func, literal, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from tvm.ir import IRModule
from tvm.s_tir import Schedule
from tvm.s_tir.analysis import estimate_tir_flops
from tvm.s_tir.meta_schedule.database import TuningRecord, Workload
from tvm.target import Target
from tvm.tirx import FloatImm, IntImm

from .models import (
    CURRENT_TIMING,
    ModelWorkloadRow,
    TargetRow,
    Timing,
    TuningRecordRow,
    WorkloadRow,
)
from .session import session_factory
from .stats import NO_RECORDS, record_stats

# MetaSchedule's stand-in run time for a candidate that failed to build or run
# (SortTuningRecordByMeanRunSecs::kMaxMeanTime in TVM's C++).
FAILED_RUN_SECS = 1e10
#: Records a build looks through for one whose trace replays on its function.
QUERY_CANDIDATES = 8


def to_plain(obj: Any) -> Any:
    """Convert TVM containers (Map, Array, IntImm, FloatImm, Target) into plain JSON data."""
    if obj is None or isinstance(obj, bool | int | float):
        return obj
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, IntImm | FloatImm):
        return obj.value
    if isinstance(obj, Target):
        return to_plain(obj.export())
    if isinstance(obj, Mapping | tvm_ffi.Map):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, Sequence | tvm_ffi.Array):
        return [to_plain(v) for v in obj]
    raise TypeError(f"cannot store a {type(obj).__name__} as JSON")


def trace_key(trace_json: Any) -> str:
    """A schedule's identity: its trace (instructions and sampling decisions) as canonical JSON."""
    return json.dumps(to_plain(trace_json), sort_keys=True, separators=(",", ":"))


def target_key(target: Target) -> str:
    """The identity of a target in the ``targets`` table: its exported config as sorted JSON."""
    return json.dumps(to_plain(target.export()), sort_keys=True, separators=(",", ":"))


def mean_run_sec(run_secs: Sequence[float] | None) -> float | None:
    """Mean of a trial's run times, or None when the trial produced no valid measurement.

    Matches TVM's TuningRecord::IsValid: a trial whose times are all the failure stand-in (1e10)
    failed; otherwise the mean is over all the times, as MetaSchedule sorts them.
    """
    if not run_secs:
        return None
    values = [float(v) for v in run_secs]
    if any(math.isnan(v) for v in values) or all(v >= FAILED_RUN_SECS for v in values):
        return None
    return sum(values) / len(values)


def _task_name(mod: IRModule) -> str:
    names = []
    for gv, fn in mod.functions.items():
        symbol = fn.attrs.get("global_symbol") if fn.attrs is not None else None
        names.append(str(symbol or gv.name_hint))
    return ",".join(sorted(names)) or "main"


def _estimate_flops(mod: IRModule) -> float | None:
    try:
        flops = float(estimate_tir_flops(mod))
    except Exception:  # The estimator rejects some loop nests; FLOPs are then unknown.
        return None
    return flops if flops > 0 else None


def replayed(record: TuningRecord) -> Schedule:
    """A fresh schedule of the record's own workload with its trace applied: the workload the
    trace was read against, since a trace names blocks (see
    :meth:`RecordRepository.tuning_record`)."""
    sch = Schedule(record.workload.mod, error_render_level="detail")
    record.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch


class RecordRepository:
    """Workloads and tuning records of one target under one timing protocol, in convtune's tables.

    This is what convtune's own code (the search, the confirmation, the cost model, the build
    report, the service) reads and writes; TVM reaches the same rows through
    :class:`~convtune.db.ms_database.SQLDatabase`, which delegates every call here.

    Contract:

    - **Target.** Every workload belongs to the target given at construction; its ``targets`` row
      is created on demand, keyed by :func:`target_key` (concurrent creators: the first insert
      wins, the others read it).
    - **Workload identity.** Two modules are the same workload iff their structural hashes are
      equal AND ``tvm_ffi.structural_equal`` holds; the lowest row id wins if concurrent writers
      ever stored equal modules twice. :meth:`workload_id` inserts a missing module; concurrent
      callers (threads or processes) on one target are serialised by a row lock on the target,
      so one module is stored once.
    - **Commits.** Every write method (:meth:`workload_id` of a new module, :meth:`insert_record`,
      :meth:`record_trial`, :meth:`record_confirmation`, :meth:`mark_exhausted`) commits in its
      own transaction before it returns: a written row survives the death of the process.
      Records are appended, never updated.
    - **Timing.** Every record written is marked with the :class:`Timing` given at construction
      (a confirmation with :attr:`Timing.CONFIRMED`), and every read, count and sample sees only
      records of that protocol: times taken warm and cold are not comparable, so a workload tuned
      warm is tuned again, cold, as if new. Confirmations are seen only by
      :meth:`confirmed_record`/:meth:`chosen_record`.
    - **Successful records.** A trial failed if it has an error or no valid run time
      (:func:`mean_run_sec`); its ``mean_sec`` and ``gflops`` are NULL. "Fastest" orders
      successful records by ``mean_sec``, ties by insertion (row id).
    - **Caching and safety.** ``Workload`` objects are cached per instance (the workload table only
      grows) behind a lock, so one instance may be shared by threads; records are always read from
      the database, so rows added by other processes are seen by the next call. Each call opens
      and closes its own session: no session outlives a call, and returned rows are detached.
    """

    def __init__(self, engine: Engine, target: Target, timing: Timing = CURRENT_TIMING) -> None:
        self._engine = engine
        self._sessions = session_factory(engine)
        self._target = target
        self._timing = timing
        self._timed_alike = TuningRecordRow.timed(timing)
        self._target_spec = to_plain(target.export())
        self._target_key = target_key(target)
        self._lock = threading.RLock()
        self._workloads: dict[int, Workload] = {}
        self._ids_by_shash: dict[str, list[int]] = {}
        self._id_by_handle: dict[int, int] = {}
        self._flops: dict[int, float | None] = {}
        self._target_id = self._ensure_target()

    # ----- target -------------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def timing(self) -> Timing:
        """The protocol of every record this repository stores and reads."""
        return self._timing

    @property
    def target(self) -> Target:
        return self._target

    @property
    def target_id(self) -> int:
        """Row id of this repository's target in ``targets``."""
        return self._target_id

    def _ensure_target(self) -> int:
        query = select(TargetRow.id).where(TargetRow.key == self._target_key)
        with self._sessions() as session:
            found = session.scalar(query)
            if found is not None:
                return found
            row = TargetRow(key=self._target_key, spec=self._target_spec)
            session.add(row)
            try:
                session.commit()
                return row.id
            except IntegrityError:  # Another process inserted the same target first.
                session.rollback()
                return session.scalars(query).one()

    # ----- workloads ----------------------------------------------------------------------

    def _remember(
        self, workload_id: int, workload: Workload, shash: str, flops: float | None
    ) -> None:
        with self._lock:
            if workload_id in self._workloads:
                return
            self._workloads[workload_id] = workload
            self._ids_by_shash.setdefault(shash, []).append(workload_id)
            self._ids_by_shash[shash].sort()
            # Safe as a key: the cache holds the Workload, so its address is never reused.
            self._id_by_handle[workload.__chandle__()] = workload_id
            self._flops[workload_id] = flops

    def _find(self, mod: IRModule, shash: str, session: Session | None = None) -> int | None:
        """Id of the stored workload structurally equal to ``mod``, loading new candidates."""
        with self._lock:
            known = list(self._ids_by_shash.get(shash, ()))
        query = select(WorkloadRow.id, WorkloadRow.mod_json, WorkloadRow.flops).where(
            WorkloadRow.target_id == self._target_id, WorkloadRow.shash == shash
        )
        if known:
            for workload_id in known:
                if tvm_ffi.structural_equal(self._workloads[workload_id].mod, mod):
                    return workload_id
            query = query.where(WorkloadRow.id.not_in(known))
        if session is None:
            with self._sessions() as own:
                rows = own.execute(query.order_by(WorkloadRow.id)).all()
        else:
            rows = session.execute(query.order_by(WorkloadRow.id)).all()
        for row in rows:
            self._remember(row.id, Workload(tvm.ir.load_json(row.mod_json)), shash, row.flops)
        for row in rows:
            if tvm_ffi.structural_equal(self._workloads[row.id].mod, mod):
                return row.id
        return None

    def find_workload(self, mod: IRModule) -> int | None:
        """Row id of the stored workload for ``mod``, or None; never writes."""
        return self._find(mod, str(tvm_ffi.structural_hash(mod)))

    def workload_id(self, mod: IRModule, task_name: str | None = None) -> int:
        """Row id of the workload for ``mod``; commits it first if missing.

        ``task_name`` labels a new row (default: the module's function names).
        """
        shash = str(tvm_ffi.structural_hash(mod))
        found = self._find(mod, shash)
        if found is not None:
            return found
        with self._sessions() as session, session.begin():
            # A no-op write on the target row: it takes the write lock (SQLite) or the row lock
            # (PostgreSQL) before we look again, so concurrent committers of one module wait
            # and then find the first one's row instead of inserting a twin.
            session.execute(
                update(TargetRow).where(TargetRow.id == self._target_id).values(key=TargetRow.key)
            )
            found = self._find(mod, shash, session)
            if found is not None:
                return found
            flops = _estimate_flops(mod)
            row = WorkloadRow(
                target_id=self._target_id,
                shash=shash,
                task_name=task_name or _task_name(mod),
                mod_json=tvm.ir.save_json(mod),
                flops=flops,
            )
            session.add(row)
            session.flush()
            workload_id = row.id
        self._remember(workload_id, Workload(mod), shash, flops)
        return workload_id

    def workload(self, workload_id: int) -> Workload:
        """The stored workload with this row id (of this target); KeyError if there is none."""
        with self._lock:
            cached = self._workloads.get(workload_id)
        if cached is not None:
            return cached
        with self._sessions() as session:
            row = session.get(WorkloadRow, workload_id)
            if row is None or row.target_id != self._target_id:
                raise KeyError(f"no workload {workload_id} for target {self._target_key}")
            self._remember(row.id, Workload(tvm.ir.load_json(row.mod_json)), row.shash, row.flops)
        return self._workloads[workload_id]

    def id_of(self, workload: Workload, *, commit: bool) -> int | None:
        """Row id of a MetaSchedule ``Workload`` (by handle when it came from here, else by
        structure); committed first if missing and ``commit``, else None when unknown."""
        with self._lock:
            cached = self._id_by_handle.get(workload.__chandle__())
        if cached is not None:
            return cached
        if commit:
            return self.workload_id(workload.mod)
        return self.find_workload(workload.mod)

    # ----- writing records ----------------------------------------------------------------

    def insert_record(
        self,
        workload_id: int,
        *,
        mean_sec: float | None = None,
        timing: Timing | None = None,
        **fields: Any,
    ) -> int:
        """Append one record (columns of ``tuning_records`` as ``fields``) and commit; returns
        its id. ``mean_sec`` defaults to :func:`mean_run_sec` of ``run_secs`` (None on an
        error), ``gflops`` to ``flops`` (else the workload's estimate) over it, ``timing`` to
        this repository's."""
        run_secs = fields.get("run_secs")
        if mean_sec is None and fields.get("error") is None:
            mean_sec = mean_run_sec(run_secs)
        flops = fields.pop("flops", None)
        if flops is None:
            flops = self._flops.get(workload_id)
        gflops = flops / mean_sec / 1e9 if flops and mean_sec else None
        row = TuningRecordRow(
            workload_id=workload_id,
            mean_sec=mean_sec,
            gflops=gflops,
            timing=(timing or self._timing).value,
            **fields,
        )
        with self._sessions() as session, session.begin():
            session.add(row)
            session.flush()
            return row.id

    def record_trial(
        self,
        workload_id: int,
        *,
        trace_json: Any,
        run_secs: list[float] | None,
        args_info_json: Any,
        error: str | None,
        trial_index: int | None,
        space: str | None,
        job_id: int | None,
        flops: float | None,
        device: str | None = None,
    ) -> int:
        """Store one trial of ``workload_id`` and return its row id (committed).

        The trial failed if ``error`` is given or ``run_secs`` holds no valid time; then
        ``mean_sec`` and ``gflops`` are NULL. ``gflops = flops / mean_sec / 1e9`` uses
        ``flops`` or, when None, the workload's estimated FLOPs.
        """
        if workload_id not in self._workloads:
            self.workload(workload_id)  # Validates that it is a workload of this target.
        return self.insert_record(
            workload_id,
            trace=to_plain(trace_json),
            run_secs=None if run_secs is None else [float(v) for v in run_secs],
            target=self._target_spec,
            args_info=to_plain(args_info_json),
            error=error,
            trial_index=trial_index,
            space=space,
            job_id=job_id,
            flops=flops,
            device=device,
        )

    def record_confirmation(
        self, row: TuningRecordRow, round_secs: Sequence[float], device: str | None = None
    ) -> int:
        """Store a re-measurement of ``row`` (its trace, args and space) on ``device`` (None:
        ``row``'s): ``round_secs`` are its times in rounds taken beside the workload's other
        fastest records, ``mean_sec`` their median, the timing :attr:`Timing.CONFIRMED`. The
        search and the cost model never read it; :meth:`chosen_record` does. Returns the new
        row's id."""
        if not round_secs:
            raise ValueError("a confirmation needs at least one round")
        return self.insert_record(
            row.workload_id,
            mean_sec=float(statistics.median(round_secs)),
            timing=Timing.CONFIRMED,
            trace=row.trace,
            run_secs=[float(v) for v in round_secs],
            target=row.target,
            args_info=row.args_info,
            error=None,
            trial_index=None,
            space=row.space,
            job_id=row.job_id,
            device=device or row.device,
        )

    def mark_exhausted(self, workload_id: int, key: str) -> None:
        """Record that a search over the spaces named by ``key`` found nothing new to measure, or
        nothing faster for several batches (it converged)."""
        with self._sessions() as session:
            session.execute(
                update(WorkloadRow).where(WorkloadRow.id == workload_id).values(exhausted_key=key)
            )
            session.commit()

    # ----- reading records ----------------------------------------------------------------

    def confirmed_record(self, workload_id: int) -> TuningRecordRow | None:
        """The fastest record of the workload's latest confirmation, if no successful trial was
        recorded after it (:meth:`TuningRecordRow.confirmed_query`); else None."""
        with self._sessions() as session:
            return session.scalars(
                TuningRecordRow.confirmed_query(workload_id, self._timing)
            ).first()

    def chosen_record(self, workload_id: int) -> TuningRecordRow | None:
        """The record a build uses: :meth:`confirmed_record` when there is one, else
        :meth:`best_record` (the fastest single measurement)."""
        return self.confirmed_record(workload_id) or self.best_record(workload_id)

    def build_candidates(self, workload_id: int) -> list[TuningRecordRow]:
        """What a build tries, in order: the chosen record (confirmed, else the fastest), then
        the fastest ``QUERY_CANDIDATES`` in case its trace does not replay."""
        chosen = self.chosen_record(workload_id)
        fastest = self.fastest_records(workload_id, QUERY_CANDIDATES)
        return ([chosen] if chosen is not None else []) + fastest

    def fastest_records(
        self, workload_id: int, top_k: int, space: str | None = None
    ) -> list[TuningRecordRow]:
        """The ``top_k`` fastest successful trials of ``workload_id`` (of ``space`` only, if
        given) under this repository's timing, fastest first (ties: the earliest)."""
        query = (
            select(TuningRecordRow)
            .where(
                TuningRecordRow.workload_id == workload_id,
                TuningRecordRow.mean_sec.is_not(None),
                self._timed_alike,
            )
            .order_by(TuningRecordRow.mean_sec, TuningRecordRow.id)
            .limit(top_k)
        )
        if space is not None:
            query = query.where(TuningRecordRow.space == space)
        with self._sessions() as session:
            return list(session.scalars(query))

    def fastest_of_each_space(self, workload_id: int) -> list[TuningRecordRow]:
        """The fastest successful trial of each space that measured ``workload_id``, under this
        repository's timing, fastest first."""
        query = (
            select(TuningRecordRow.space)
            .where(
                TuningRecordRow.workload_id == workload_id,
                TuningRecordRow.mean_sec.is_not(None),
                self._timed_alike,
            )
            .distinct()
        )
        with self._sessions() as session:
            spaces = list(session.scalars(query))
        rows = [row for space in spaces for row in self.fastest_records(workload_id, 1, space)]
        return sorted(rows, key=lambda row: (row.mean_sec, row.id))

    def best_record(self, workload_id: int) -> TuningRecordRow | None:
        """The fastest successful record of ``workload_id`` (ties: the earliest), or None."""
        rows = self.fastest_records(workload_id, 1)
        return rows[0] if rows else None

    def exhausted_key(self, workload_id: int) -> str | None:
        """The key last given to :meth:`mark_exhausted` for ``workload_id``, or None."""
        with self._sessions() as session:
            return session.scalar(
                select(WorkloadRow.exhausted_key).where(WorkloadRow.id == workload_id)
            )

    def count_trials(self, workload_id: int, space: str | None = None) -> int:
        """Number of records of ``workload_id``, failed trials included; only ``space``'s if
        given."""
        with self._sessions() as session:
            stats = record_stats(session, [workload_id], space=space, timing=self._timing)
        return stats.get(workload_id, NO_RECORDS).trials

    def trace_keys(self, workload_id: int) -> set[str]:
        """``trace_key`` of every schedule measured for ``workload_id`` (to never measure twice)."""
        query = select(TuningRecordRow.trace).where(
            TuningRecordRow.workload_id == workload_id, self._timed_alike
        )
        with self._sessions() as session:
            return {trace_key(trace) for trace in session.scalars(query)}

    def _target_records(self) -> Select[TuningRecordRow]:
        return (
            select(TuningRecordRow)
            .join(WorkloadRow, WorkloadRow.id == TuningRecordRow.workload_id)
            .where(WorkloadRow.target_id == self._target_id, self._timed_alike)
        )

    def all_records(self) -> list[TuningRecordRow]:
        """Every record of this target, failed ones included, in insertion order."""
        with self._sessions() as session:
            return list(session.scalars(self._target_records().order_by(TuningRecordRow.id)))

    def count_records(self) -> int:
        """How many records :meth:`all_records` returns, counted by the database."""
        query = select(func.count()).select_from(self._target_records().subquery())
        with self._sessions() as session:
            return int(session.scalar(query) or 0)

    def max_record_id(self) -> int:
        """The highest ``tuning_records.id`` of this target (0 when it has none)."""
        query = select(func.max(TuningRecordRow.id)).join(
            WorkloadRow, WorkloadRow.id == TuningRecordRow.workload_id
        )
        with self._sessions() as session:
            found = session.scalar(
                query.where(WorkloadRow.target_id == self._target_id, self._timed_alike)
            )
        return int(found or 0)

    # ----- MetaSchedule records of stored rows -------------------------------------------

    def tuning_record(self, row: TuningRecordRow, mod: IRModule | None = None) -> TuningRecord:
        """The MetaSchedule record of a stored row, its trace replayed on the stored workload
        (loaded and cached), or else on ``mod``; raises the replay's error if neither takes it.

        Structurally equal functions share one workload row, but a trace names blocks, and
        structural equality ignores block names: FuseTIR numbers the blocks of fused elementwise
        ops per model (``tir_sigmoid18`` in one task, ``tir_sigmoid11`` in its twin), so a trace
        measured on the twin replays on the twin only. EfficientNet-B0's build died on one
        (2026-11-30); the build queries with its own function, which such a trace fits.
        """
        plain = [row.trace, row.run_secs, row.target, row.args_info]
        try:
            return TuningRecord.from_json(plain, self.workload(row.workload_id))
        except Exception:
            if mod is None:
                raise
            return TuningRecord.from_json(plain, Workload(mod))

    def replayed_schedule(
        self, row: TuningRecordRow, mod: IRModule | None = None
    ) -> Schedule | None:
        """The schedule of ``row``: its trace replayed on the workload it fits (the stored one,
        else ``mod``, as in :meth:`tuning_record`), or None when it fits neither."""
        record = next(self.replayable([row], mod), None)
        return None if record is None else replayed(record)

    def replayable(
        self, rows: Sequence[TuningRecordRow], mod: IRModule | None
    ) -> Iterator[TuningRecord]:
        """The rows whose traces replay (``tuning_record``), in order; the others are left out:
        a twin's trace that fits neither function, or a trace of a space that changed since."""
        for row in rows:
            try:
                yield self.tuning_record(row, mod)
            except Exception:
                continue

    def sample_records(
        self,
        *,
        top_k: int,
        random_k: int,
        after_id: int = 0,
        upto_id: int | None = None,
        seed: int = 0,
    ) -> list[TuningRecordRow]:
        """Successful records of every workload of this target, a bounded sample per workload.

        Per workload: its ``top_k`` fastest records (ties: the earliest) and ``random_k`` records
        drawn uniformly from all of its successful ones (a record in both counts once), among
        records with ``after_id < id <= upto_id``. The draw is a fixed hash of the row id and
        ``seed``, so the same database gives the same sample on SQLite and PostgreSQL. One query;
        rows come ordered by workload, then id.
        """
        where = [
            WorkloadRow.target_id == self._target_id,
            TuningRecordRow.mean_sec.is_not(None),
            TuningRecordRow.id > after_id,
            self._timed_alike,
        ]
        if upto_id is not None:
            where.append(TuningRecordRow.id <= upto_id)

        # A portable, seeded pseudo-random order: Knuth's multiplicative hash offset by the seed,
        # squared modulo a prime (affine maps alone only rotate the order between seeds). Every
        # product stays below 2^63 for ids below 2^31: no integer overflow on either database.
        def big(value: int) -> Any:
            return literal(value, BigInteger)

        rid = cast(TuningRecordRow.id, BigInteger)
        offset = (seed * 1013904223) % 2147483648
        mixed = (rid * big(2654435761) + big(offset)) % big(2147483648)
        shuffled = (mixed * mixed) % big(2147483647)
        ranked = (
            select(
                TuningRecordRow.id.label("rid"),
                func.row_number()
                .over(
                    partition_by=TuningRecordRow.workload_id,
                    order_by=(TuningRecordRow.mean_sec, TuningRecordRow.id),
                )
                .label("best_rank"),
                func.row_number()
                .over(partition_by=TuningRecordRow.workload_id, order_by=shuffled)
                .label("random_rank"),
            )
            .join(WorkloadRow, WorkloadRow.id == TuningRecordRow.workload_id)
            .where(*where)
            .subquery()
        )
        query = (
            select(TuningRecordRow)
            .join(ranked, ranked.c.rid == TuningRecordRow.id)
            .where((ranked.c.best_rank <= top_k) | (ranked.c.random_rank <= random_k))
            .order_by(TuningRecordRow.workload_id, TuningRecordRow.id)
        )
        with self._sessions() as session:
            return list(session.scalars(query))

    def best_gflops_by_workload(self) -> dict[int, tuple[str | None, float]]:
        """Workload id -> (its kind as a model task, e.g. "conv", or None; best GFLOP/s) for
        every workload of this target with a successful record."""
        best = (
            select(TuningRecordRow.workload_id, func.max(TuningRecordRow.gflops))
            .join(WorkloadRow, WorkloadRow.id == TuningRecordRow.workload_id)
            .where(
                WorkloadRow.target_id == self._target_id,
                TuningRecordRow.gflops.is_not(None),
                self._timed_alike,
            )
            .group_by(TuningRecordRow.workload_id)
        )
        kinds = (
            select(ModelWorkloadRow.workload_id, ModelWorkloadRow.kind)
            .join(WorkloadRow, WorkloadRow.id == ModelWorkloadRow.workload_id)
            .where(WorkloadRow.target_id == self._target_id)
            .distinct()
        )
        with self._sessions() as session:
            kind_of = {wid: kind for wid, kind in session.execute(kinds)}
            return {
                wid: (kind_of.get(wid), float(gflops))
                for wid, gflops in session.execute(best)
                if gflops is not None
            }
