"""What every ``convtune`` command shares: common options, user-error handling, the database."""

from __future__ import annotations

import os
import tempfile
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from convtune.tuner.errors import ConvtuneError, error_line

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from convtune.tuner.graph.ingest import IngestedModel

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db", help="Database URL (default: $CONVTUNE_DATABASE_URL or ./data/convtune.db)."
    ),
]
InputShapeOption = Annotated[
    list[str] | None,
    typer.Option("--input-shape", help="Pin an input's shape: NAME=1,3,224,224 (repeatable)."),
]


@contextmanager
def user_errors() -> Iterator[None]:
    """A user mistake ends the command with its one-line message and exit code, no traceback.

    Anything else is our bug, and still one line (exit 1): its traceback goes to a file named
    in that line, for the report, not to the user's terminal."""
    try:
        yield
    except ConvtuneError as err:
        typer.echo(f"error: {err.message}", err=True)
        raise typer.Exit(err.exit_code) from None
    except Exception as exc:
        fd, path = tempfile.mkstemp(prefix="convtune-error-", suffix=".txt")
        with os.fdopen(fd, "w") as report:
            report.write(traceback.format_exc())
        typer.echo(f"error: internal error: {error_line(exc)} (traceback in {path})", err=True)
        raise typer.Exit(1) from None


def open_database(db: str | None) -> Engine:
    """The engine for ``db`` (default URL if None), migrated to the latest schema."""
    from convtune.db.migrate import upgrade
    from convtune.db.session import make_engine

    upgrade(db)
    return make_engine(db)


def load_ingested(model: Path, input_shape: list[str] | None) -> IngestedModel:
    from convtune.tuner.graph.ingest import load_model, parse_input_shape

    shapes = dict(parse_input_shape(text) for text in input_shape or [])
    return load_model(model, shapes or None)
