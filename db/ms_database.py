"""MetaSchedule's tuning database on SQL: TVM's ``Database`` interface over convtune's tables.

The adapter only translates TVM's calls; the rows are read and written by
:class:`convtune.db.records.RecordRepository` (``SQLDatabase.records``), which convtune's own code
uses directly, so there is one implementation of every query. The helpers re-exported below live
in :mod:`convtune.db.records`.
"""

from __future__ import annotations

from sqlalchemy import Engine
from tvm.ir import IRModule
from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.database import PyDatabase, TuningRecord, Workload
from tvm.target import Target

from .models import CURRENT_TIMING, Timing
from .records import (
    FAILED_RUN_SECS,
    QUERY_CANDIDATES,
    RecordRepository,
    mean_run_sec,
    replayed,
    target_key,
    to_plain,
    trace_key,
)

__all__ = [
    "FAILED_RUN_SECS",
    "QUERY_CANDIDATES",
    "SQLDatabase",
    "mean_run_sec",
    "target_key",
    "to_plain",
    "trace_key",
]


@derived_object
class SQLDatabase(PyDatabase):
    """A MetaSchedule ``Database`` whose storage is convtune's SQL tables, bound to one target.

    What TVM sees (the storage guarantees, commits and thread/process safety are those of
    :class:`~convtune.db.records.RecordRepository`, to which every method delegates):

    - ``commit_workload(mod)`` returns the stored :class:`Workload` for ``mod``, inserting it if
      missing; ``has_workload`` never inserts.
    - ``commit_tuning_record`` appends a row and commits before returning; a record without a
      valid run time is stored as failed.
    - ``get_top_k(workload, k)`` returns at most ``k`` *successful* records of that workload, by
      mean run time ascending, ties broken by insertion; failed trials are never returned by it.
      ``get_all_tuning_records`` returns every record of this target, failed ones included, in
      insertion order; ``len()`` counts them. Records whose traces no longer replay are left out.
    - ``query_tuning_record``/``query_schedule``/``query_ir_module`` return the record a build
      uses (:meth:`RecordRepository.chosen_record`: confirmed, else the fastest; then the fastest
      few if its trace does not replay on ``mod``), the schedule made by replaying its trace on a
      fresh ``tvm.s_tir.Schedule``, or that schedule's module; None when the workload is unknown
      or has no successful record. Their ``target`` argument is ignored, as in TVM's JSON
      database: this one is bound to a target already.
    """

    def __init__(
        self,
        engine: Engine,
        target: Target,
        module_equality: str = "structural",
        timing: Timing = CURRENT_TIMING,
    ) -> None:
        if module_equality != "structural":
            raise ValueError(
                f"SQLDatabase supports module_equality='structural' only, got {module_equality!r}"
            )
        #: Convtune's reads and writes of the same rows (the search, confirmation, build report).
        self.records = RecordRepository(engine, target, timing)

    # ----- workloads ----------------------------------------------------------------------

    def has_workload(self, mod: IRModule) -> bool:
        return self.records.find_workload(mod) is not None

    def commit_workload(self, mod: IRModule) -> Workload:
        return self.records.workload(self.records.workload_id(mod))

    # ----- tuning records -----------------------------------------------------------------

    def commit_tuning_record(self, record: TuningRecord) -> None:
        workload_id = self.records.id_of(record.workload, commit=True)
        assert workload_id is not None
        trace, run_secs, target, args_info = to_plain(record.as_json())
        failed = mean_run_sec(run_secs) is None
        self.records.insert_record(
            workload_id,
            trace=trace,
            run_secs=run_secs,
            target=target,
            args_info=args_info,
            error="build or run failed (MetaSchedule gave no valid run time)" if failed else None,
        )

    def get_top_k(self, workload: Workload, top_k: int) -> list[TuningRecord]:
        if top_k <= 0:
            return []
        workload_id = self.records.id_of(workload, commit=False)
        if workload_id is None:
            return []
        rows = self.records.fastest_records(workload_id, top_k)
        return list(self.records.replayable(rows, workload.mod))

    def get_all_tuning_records(self) -> list[TuningRecord]:
        return list(self.records.replayable(self.records.all_records(), None))

    def __len__(self) -> int:
        return self.records.count_records()

    # ----- queries used when building -----------------------------------------------------

    def query_tuning_record(
        self, mod: IRModule, target: Target, workload_name: str | None = None
    ) -> TuningRecord | None:
        workload_id = self.records.find_workload(mod)
        if workload_id is None:
            return None
        return next(self.records.replayable(self.records.build_candidates(workload_id), mod), None)

    def query_schedule(
        self, mod: IRModule, target: Target, workload_name: str | None = None
    ) -> Schedule | None:
        record = self.query_tuning_record(mod, target, workload_name)
        return None if record is None else replayed(record)

    def query_ir_module(
        self, mod: IRModule, target: Target, workload_name: str | None = None
    ) -> IRModule | None:
        sch = self.query_schedule(mod, target, workload_name)
        return None if sch is None else sch.mod
