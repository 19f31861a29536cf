"""Shared database fixtures.

``db_url`` is an empty database, once per backend: a SQLite file in ``tmp_path`` and, marked
``postgres``, a fresh schema on the PostgreSQL server (dropped afterwards), which is skipped with
its reason only when the server does not answer. ``db_engine`` is that database migrated to head.
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import psycopg
import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from convtune.db.migrate import upgrade
from convtune.db.session import make_engine

POSTGRES_URL = os.environ.get(
    "CONVTUNE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _libpq_url(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@functools.cache
def postgres_unavailable() -> str | None:
    """Why the test PostgreSQL server cannot be used, or None when it answers."""
    try:
        with psycopg.connect(_libpq_url(POSTGRES_URL), connect_timeout=3):
            return None
    except psycopg.Error as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"PostgreSQL at {POSTGRES_URL} does not answer: {first_line}"


@contextlib.contextmanager
def postgres_schema(prefix: str = "test") -> Iterator[str]:
    """URL of a fresh, empty schema on the test PostgreSQL server; the schema is dropped after.

    Skips the calling test with the reason when the server does not answer.
    """
    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = _libpq_url(POSTGRES_URL)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    url = make_url(POSTGRES_URL).update_query_dict({"options": f"-csearch_path={quote(schema)}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def postgres_schema_url() -> Iterator[str]:
    """A fresh schema on the test PostgreSQL server, for one test."""
    with postgres_schema() as url:
        yield url


@pytest.fixture
def sqlite_engine(tmp_path) -> Iterator[Engine]:
    """For the long tuning runs: the SQL backends are compared by the cheaper tests."""
    url = f"sqlite:///{tmp_path / 'convtune.db'}"
    upgrade(url)
    engine = make_engine(url)
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """An empty database URL; the test runs once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'convtune.db'}"
    return request.getfixturevalue("postgres_schema_url")


@pytest.fixture
def db_engine(db_url: str) -> Iterator[Engine]:
    """An engine on ``db_url`` after ``convtune.db.migrate.upgrade``; disposed after the test."""
    upgrade(db_url)
    engine = make_engine(db_url)
    try:
        yield engine
    finally:
        engine.dispose()
