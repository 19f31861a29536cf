"""Dependencies shared by the routes, as ``Annotated`` aliases (``SessionDep``, ``SettingsDep``,
``TokenDep``) so a route states what it needs in its signature."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from ..core.config import Settings
from ..core.errors import ApiError

_bearer = HTTPBearer(auto_error=False, description="Needed when CONVTUNE_API_TOKEN is set")


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


def require_token(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Refuse the request (401) unless it carries the configured bearer token; no-op without one."""
    if not settings.auth_enabled:
        return
    challenge = {"WWW-Authenticate": "Bearer"}
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiError(
            401, "unauthorized", "this endpoint needs 'Authorization: Bearer <token>'", challenge
        )
    assert settings.api_token is not None
    if not hmac.compare_digest(credentials.credentials.encode(), settings.api_token.encode()):
        raise ApiError(401, "unauthorized", "the bearer token is wrong", challenge)


TokenDep = Annotated[None, Depends(require_token)]
