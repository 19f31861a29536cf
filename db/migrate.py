"""Bring a database's schema to the newest migration, without assuming the working directory."""

from __future__ import annotations

from importlib import resources

from alembic import command
from alembic.config import Config

from .session import make_engine


def alembic_config() -> Config:
    """The alembic configuration shipped in the package (scripts located via the package path)."""
    ini = resources.files("convtune.db") / "alembic.ini"
    config = Config(str(ini))
    config.set_main_option("script_location", str(resources.files("convtune.db") / "migrations"))
    return config


def upgrade(url: str | None = None, revision: str = "head") -> None:
    """Migrate the database at ``url`` (default: the configured one) to ``revision``.

    Idempotent: an up-to-date database is left as is. Committed when it returns.
    """
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            config = alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        engine.dispose()
