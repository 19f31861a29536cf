"""One JSON error shape for every 4xx/5xx: ``{"error": {"code": "...", "message": "..."}}``.

Routes raise ``ApiError``; user mistakes from the engine (``ConvtuneError``) become their
``http_status`` (400; 422 for a model TVM cannot convert) with the engine's one-line message; a
busy database is a 503 with Retry-After (``dbbusy``); anything else is a 500 whose message names
no internals.
"""

from __future__ import annotations

import logging
import re
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

from convtune.tuner.errors import ConvtuneError

from .busy import RETRY_AFTER_SECONDS, is_busy

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An error response: HTTP status, a stable machine-readable code, one human line."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


class BodyTooLarge(StarletteHTTPException):
    """A request body over its cap, raised while it is read (FastAPI lets HTTPExceptions from
    body reading through, where any other exception would become a 400)."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(error.status, error.message)
        self.code = error.code


def not_found(what: str, ident: object) -> ApiError:
    return ApiError(404, "not_found", f"{what} {ident} does not exist")


def busy_error() -> ApiError:
    """A busy database is the server's problem, not the client's: 503 with Retry-After."""
    return ApiError(
        503,
        "database_busy",
        f"the database is busy; retry in {RETRY_AFTER_SECONDS} s",
        {"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def convtune_error_code(exc: ConvtuneError) -> str:
    """``InvalidModelError`` → ``invalid_model``; the base class → ``bad_request``."""
    if type(exc) is ConvtuneError:
        return "bad_request"
    name = type(exc).__name__.removesuffix("Error")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def _response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(error_body(code, message), status_code=status, headers=headers)


def _code_for_status(status: int) -> str:
    try:
        return HTTPStatus(status).phrase.lower().replace(" ", "_").replace("-", "_")
    except ValueError:
        return "http_error"


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{where}: {err.get('msg', 'invalid')}" if where else err.get("msg", ""))
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    """Route every error path through ``error_body``."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(ConvtuneError)
    async def _convtune_error(_: Request, exc: ConvtuneError) -> JSONResponse:
        return _response(exc.http_status, convtune_error_code(exc), exc.message)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _response(422, "validation_error", _validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else _code_for_status(exc.status_code)
        headers = dict(exc.headers) if exc.headers else None
        code = getattr(exc, "code", None) or _code_for_status(exc.status_code)
        return _response(exc.status_code, code, message, headers)

    @app.exception_handler(DBAPIError)
    async def _database(request: Request, exc: DBAPIError) -> JSONResponse:
        if is_busy(exc):
            busy = busy_error()
            log.warning("database busy on %s %s", request.method, request.url.path)
            return _response(busy.status, busy.code, busy.message, busy.headers)
        return await _unexpected(request, exc)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return _response(500, "internal_error", f"internal error ({type(exc).__name__})")
