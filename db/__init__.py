"""Persistence: SQLAlchemy models, alembic migrations, the MetaSchedule database adapter.

Modules (import them directly; this package imports nothing so that ``convtune.db.models`` stays
free of TVM):

- ``session``: ``default_database_url()``, ``make_engine(url)``, ``session_factory(engine)``
- ``models``: the ORM tables (``TargetRow``, ``ModelRow``, ``WorkloadRow``, ``ModelWorkloadRow``,
  ``TuningRecordRow``, ``ArtifactRow``, ``JobRow``, ``JobEventRow``)
- ``migrate``: ``upgrade(url)`` runs the shipped alembic migrations to head
- ``records``: ``RecordRepository``, convtune's reads and writes of workloads and tuning records
  for one target (the search, confirmation, cost model, build); ``target_key(target)``,
  ``trace_key``, ``to_plain``
- ``ms_database``: ``SQLDatabase``, TVM's ``tvm.s_tir.meta_schedule`` database interface, a thin
  adapter over a ``RecordRepository`` (``database.records``)

The read model the API and the dashboard share is ``convtune.service.readmodels``.
"""
