"""Persistence: SQLAlchemy models, alembic migrations, the MetaSchedule database adapter.

Modules (import them directly; this package imports nothing so that ``convtune.db.models`` stays
free of TVM):

- ``session``: ``default_database_url()``, ``make_engine(url)``, ``session_factory(engine)``
- ``models``: the ORM tables (``TargetRow``, ``ModelRow``, ``WorkloadRow``, ``ModelWorkloadRow``,
  ``TuningRecordRow``, ``ArtifactRow``, ``JobRow``, ``JobEventRow``)
- ``migrate``: ``upgrade(url)`` runs the shipped alembic migrations to head
- ``ms_database``: ``SQLDatabase``, a ``tvm.s_tir.meta_schedule`` database over those tables,
  and ``target_key(target)``
"""
