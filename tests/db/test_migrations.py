"""The shipped alembic migrations build exactly the schema the ORM models describe."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from convtune.db.migrate import alembic_config, upgrade
from convtune.db.models import CURRENT_TIMING, Base, Timing
from convtune.db.session import make_engine


def _diffs(engine) -> list:
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": True}
        )
        return compare_metadata(context, Base.metadata)


def test_upgrade_matches_models_and_is_idempotent(db_url):
    upgrade(db_url)
    upgrade(db_url)  # A second run must be a no-op, not an error.
    engine = make_engine(db_url)
    try:
        assert _diffs(engine) == []
        head = ScriptDirectory.from_config(alembic_config()).get_current_head()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == head
        assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_downgrade_to_base_then_upgrade_again(db_url):
    upgrade(db_url)
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, "base")
        assert not set(Base.metadata.tables) & set(inspect(engine).get_table_names())
        upgrade(db_url)
        assert _diffs(engine) == []
    finally:
        engine.dispose()


def test_migrations_run_from_any_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    upgrade(url)
    engine = make_engine(url)
    try:
        assert "tuning_records" in inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_records_stored_before_the_timing_column_read_as_timed_warm(db_url):
    upgrade(db_url, "0006")
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO targets (id, created_at, key, spec)"
                    " VALUES (1, '2026-01-01', 'k', '{}')"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO workloads (id, created_at, target_id, shash, task_name, mod_json)"
                    " VALUES (1, '2026-01-01', 1, 'h', 'main', '{}')"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO tuning_records (id, created_at, workload_id, trace, mean_sec)"
                    " VALUES (1, '2026-01-01', 1, '[]', 0.001)"
                )
            )
        upgrade(db_url)
        with engine.connect() as conn:
            timing = conn.execute(text("SELECT timing FROM tuning_records WHERE id = 1")).scalar()
        assert timing == Timing.WARM.value != CURRENT_TIMING.value
    finally:
        engine.dispose()
