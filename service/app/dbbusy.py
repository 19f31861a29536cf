"""A busy database is the server's problem, not the client's: retry, then 503 + Retry-After.

"Busy" is SQLite's ``database is locked``/``busy`` (a writer held the lock longer than the busy
timeout) and PostgreSQL's ``lock_timeout`` (``LockNotAvailable``) or a cancelled statement.
Every other database error stays an error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, OperationalError

from .core.errors import ApiError

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_AFTER_SECONDS = 5
_SQLITE_BUSY = ("database is locked", "database is busy", "database table is locked")
# SQLSTATEs: lock_not_available, query_canceled (statement_timeout), deadlock, serialization.
_POSTGRES_BUSY = {"55P03", "57014", "40P01", "40001"}


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` means "the database is busy, try again" rather than a real fault."""
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if sqlstate in _POSTGRES_BUSY:
        return True
    return isinstance(exc, OperationalError) and any(s in str(orig).lower() for s in _SQLITE_BUSY)


def busy_error() -> ApiError:
    return ApiError(
        503,
        "database_busy",
        f"the database is busy; retry in {RETRY_AFTER_SECONDS} s",
        {"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def with_retries(action: Callable[[], T], retries: int, *, backoff: float = 0.2) -> T:
    """Run ``action`` (one whole transaction: it opens and commits its own session) again while
    the database is busy, up to ``retries`` more times; then answer 503."""
    for attempt in range(retries + 1):
        try:
            return action()
        except DBAPIError as exc:
            if not is_busy(exc):
                raise
            log.warning("database busy (attempt %d of %d)", attempt + 1, retries + 1)
            if attempt < retries:
                time.sleep(backoff * 2**attempt)
    raise busy_error()
