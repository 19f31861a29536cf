"""Engine configuration and the default database location."""

from __future__ import annotations

import threading

from sqlalchemy import text

from convtune.db.session import default_database_url, make_engine, session_factory


def test_default_url_is_sqlite_in_data_dir_created_on_demand(monkeypatch, tmp_path):
    monkeypatch.delenv("CONVTUNE_DATABASE_URL", raising=False)
    data = tmp_path / "nested" / "data"
    monkeypatch.setenv("CONVTUNE_DATA_DIR", str(data))
    assert default_database_url() == f"sqlite:///{data / 'convtune.db'}"
    assert data.is_dir()


def test_default_url_falls_back_to_dot_data(monkeypatch, tmp_path):
    monkeypatch.delenv("CONVTUNE_DATABASE_URL", raising=False)
    monkeypatch.delenv("CONVTUNE_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_database_url() == f"sqlite:///{tmp_path / 'data' / 'convtune.db'}"
    assert (tmp_path / "data").is_dir()


def test_env_url_wins(monkeypatch):
    monkeypatch.setenv("CONVTUNE_DATABASE_URL", "postgresql+psycopg://u@h/db")
    assert default_database_url() == "postgresql+psycopg://u@h/db"


def test_sqlite_engine_pragmas_and_cross_thread_use(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'sub' / 'x.db'}")
    try:
        with engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 30000
            assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
            # TVM calls the adapter from its own threads: a connection made here must work there.
            results: list[object] = []
            worker = threading.Thread(
                target=lambda: results.append(conn.execute(text("SELECT 41 + 1")).scalar())
            )
            worker.start()
            worker.join()
            assert results == [42]
        assert (tmp_path / "sub" / "x.db").exists()
    finally:
        engine.dispose()


def test_in_memory_sqlite_is_shared_by_sessions():
    engine = make_engine("sqlite://")
    sessions = session_factory(engine)
    with sessions() as one:
        one.execute(text("CREATE TABLE t (x INTEGER)"))
        one.execute(text("INSERT INTO t VALUES (7)"))
        one.commit()
    with sessions() as two:
        assert two.execute(text("SELECT x FROM t")).scalar() == 7
    engine.dispose()
