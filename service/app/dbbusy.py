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

from sqlalchemy.exc import DBAPIError

from .core.busy import is_busy
from .core.errors import busy_error

log = logging.getLogger(__name__)

T = TypeVar("T")


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
