"""Engines and sessions: where the database lives and how connections to it are configured."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

DATABASE_URL_ENV = "CONVTUNE_DATABASE_URL"
DATA_DIR_ENV = "CONVTUNE_DATA_DIR"

# Tuning measures for minutes while the worker, the web app and the CLI share one SQLite file:
# writers must wait for each other rather than fail with "database is locked". The API passes a
# shorter wait (``busy_timeout``) so a request answers 503 instead of hanging for half a minute.
DEFAULT_BUSY_TIMEOUT_SECONDS = 30.0


def data_dir() -> Path:
    """The data directory (env ``CONVTUNE_DATA_DIR``, else ``./data``), created if missing."""
    path = Path(os.environ.get(DATA_DIR_ENV) or "data").expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_database_url() -> str:
    """Env ``CONVTUNE_DATABASE_URL`` if set, else a SQLite file ``convtune.db`` in the data dir."""
    url = os.environ.get(DATABASE_URL_ENV)
    if url:
        return url
    return f"sqlite:///{data_dir() / 'convtune.db'}"


def _is_sqlite_memory(database: str | None) -> bool:
    return not database or database == ":memory:" or database.startswith("file::memory:")


def _sqlite_setup(busy_ms: int) -> Any:
    def configure(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
            cursor.execute("PRAGMA foreign_keys=ON")
        finally:
            cursor.close()

    return configure


def _postgres_setup(busy_ms: int) -> Any:
    def configure(dbapi_connection: Any, _record: Any) -> None:
        # A lock wait longer than this raises LockNotAvailable instead of blocking forever.
        # Not autocommit: the SET runs in a transaction that must be committed to stick.
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"SET lock_timeout = {busy_ms}")
        finally:
            cursor.close()
        dbapi_connection.commit()

    return configure


def make_engine(
    url: str | None = None, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT_SECONDS, **kwargs: Any
) -> Engine:
    """Create an engine for ``url`` (default: :func:`default_database_url`).

    SQLite connections get WAL journaling (readers never block the writer), a ``busy_timeout``
    (seconds, default 30) for a locked database (on PostgreSQL: ``lock_timeout``),
    foreign-key enforcement, and may be used from any thread: TVM calls the MetaSchedule
    database adapter from its own threads. The parent directory of a SQLite file is created.
    An in-memory SQLite database is shared by all sessions of the engine (one connection).
    Extra ``kwargs`` go to :func:`sqlalchemy.create_engine`.
    """
    sa_url = make_url(url or default_database_url())
    busy_ms = max(1, round(busy_timeout * 1000))
    if sa_url.get_backend_name() != "sqlite":
        kwargs.setdefault("pool_pre_ping", True)
        engine = create_engine(sa_url, **kwargs)
        if sa_url.get_backend_name() == "postgresql":
            event.listen(engine, "connect", _postgres_setup(busy_ms))
        return engine

    connect_args = dict(kwargs.pop("connect_args", {}))
    connect_args.setdefault("check_same_thread", False)
    database = sa_url.database
    if database is None or _is_sqlite_memory(database):
        kwargs.setdefault("poolclass", StaticPool)
    else:
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(sa_url, connect_args=connect_args, **kwargs)
    event.listen(engine, "connect", _sqlite_setup(busy_ms))
    return engine


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """A session factory bound to ``engine``; objects stay readable after commit."""
    return sessionmaker(bind=engine, expire_on_commit=False)
