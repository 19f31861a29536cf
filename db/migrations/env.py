"""Alembic environment: runs migrations online against convtune's database.

The connection comes from ``config.attributes["connection"]`` when called programmatically
(:func:`convtune.db.migrate.upgrade`), else from ``-x url=...``, the ``sqlalchemy.url`` option,
or :func:`convtune.db.session.default_database_url`, in that order.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from convtune.db.models import Base
from convtune.db.session import make_engine

target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things: later migrations rebuild tables in batch mode.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_online() -> None:
    config = context.config
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    engine = make_engine(url or None)
    try:
        with engine.connect() as connection:
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("convtune migrations run online only: give a database URL, not --sql")
_run_online()
