"""Dependencies shared by the routes, as ``Annotated`` aliases (``SessionDep``, ``SettingsDep``,
``ReaderDep``, ``WriterDep``, ``RowId``, ``ListLimit``, ``PageNumber``) so a route states what it
needs in its signature."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from ..core.config import ANONYMOUS, Settings, client_id
from ..core.errors import ApiError

_bearer = HTTPBearer(auto_error=False, description="Needed when CONVTUNE_API_TOKEN is set")

# Row ids are 32-bit signed integers on PostgreSQL; a bigger one would overflow the driver (500),
# so the route refuses it (422) before any query.
MAX_ROW_ID = 2**31 - 1
RowId = Annotated[int, Path(ge=1, le=MAX_ROW_ID)]
#: How many rows a list endpoint returns (``?limit=``).
ListLimit = Annotated[int, Query(ge=1, le=1000)]
#: A dashboard page number (``?page=``), 1-based; the bound keeps the row offset an integer a
#: database accepts.
PageNumber = Annotated[int, Query(ge=1, le=1_000_000)]

# The dashboard keeps the token in this cookie (set by /login or ``?token=``); the API accepts it
# for reads only, so a cross-site form cannot write with it.
TOKEN_COOKIE = "convtune_token"


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_engine(request: Request) -> Engine:
    return request.app.state.engine


def get_session(request: Request) -> Iterator[Session]:
    """One session per request; the route commits what it changes."""
    with request.app.state.session_factory() as session:
        yield session


SettingsDep = Annotated[Settings, Depends(get_settings)]
EngineDep = Annotated[Engine, Depends(get_engine)]
SessionDep = Annotated[Session, Depends(get_session)]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the client id (quotas, fair queue) and whether it may write."""

    client: str
    can_write: bool


_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def _matches(token: str, candidates: list[str]) -> bool:
    # Every candidate is compared, in constant time each.
    found = False
    for candidate in candidates:
        found |= hmac.compare_digest(token.encode(), candidate.encode())
    return found


def identify(settings: Settings, token: str | None) -> Caller | None:
    """The caller a token stands for; None for a wrong token. No auth → everyone may write."""
    if not settings.auth_enabled:
        return Caller(ANONYMOUS, can_write=True)
    if token is None:
        return Caller(ANONYMOUS, can_write=False)
    if _matches(token, settings.write_tokens()):
        return Caller(client_id(token), can_write=True)
    if _matches(token, settings.read_only_tokens()):
        return Caller(client_id(token), can_write=False)
    return None


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, _CHALLENGE)


def _bearer_token(credentials: HTTPAuthorizationCredentials | None) -> str | None:
    if credentials is None or credentials.scheme.lower() != "bearer":
        return None
    return credentials.credentials


def _reader(request: Request, settings: Settings, token: str | None, public: bool) -> Caller:
    token = token or request.cookies.get(TOKEN_COOKIE)
    caller = identify(settings, token)
    if caller is None:
        raise _unauthorized("the token is wrong")
    if token is None and settings.auth_enabled and not public:
        raise _unauthorized("this endpoint needs 'Authorization: Bearer <token>'")
    return caller


def require_read(request: Request, settings: SettingsDep, credentials: Credentials) -> Caller:
    """Reads need a (read or write) token once one is set, unless ``CONVTUNE_PUBLIC_READ``.

    The dashboard's cookie counts here too (EventSource cannot send headers)."""
    return _reader(request, settings, _bearer_token(credentials), settings.public_read)


def require_download(request: Request, settings: SettingsDep, credentials: Credentials) -> Caller:
    """Downloads need a (read or write) token once one is set, even with public reads."""
    return _reader(request, settings, _bearer_token(credentials), public=False)


def require_write(settings: SettingsDep, credentials: Credentials) -> Caller:
    """Writes and downloads need a write token (bearer header only) once one is set."""
    token = _bearer_token(credentials)
    caller = identify(settings, token)
    if caller is None:
        raise _unauthorized("the bearer token is wrong")
    if token is None and settings.auth_enabled:
        raise _unauthorized("this endpoint needs 'Authorization: Bearer <token>'")
    if not caller.can_write:
        raise ApiError(403, "read_only_token", "this token may only read")
    return caller


ReaderDep = Annotated[Caller, Depends(require_read)]
DownloaderDep = Annotated[Caller, Depends(require_download)]
WriterDep = Annotated[Caller, Depends(require_write)]
