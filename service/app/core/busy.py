"""What a busy database looks like: SQLite's ``database is locked``/``busy`` (a writer held the
lock longer than the busy timeout), PostgreSQL's ``lock_timeout`` (``LockNotAvailable``) or a
cancelled statement. The API answers those 503 + Retry-After; every other database error stays an
error."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError, OperationalError

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
