"""The dashboard behind a token: a browser cannot send ``Authorization`` headers from a link.

Once, the token comes in through the small form at ``/login`` or as ``?token=`` on any page; it
is checked and kept in an HttpOnly, SameSite=Strict cookie (``TOKEN_COOKIE``), and the page is
reloaded without it in the URL. The cookie opens reads (pages, the API's GETs, the event stream),
never writes. A page opened without it sends the browser to ``/login``.
"""

from __future__ import annotations

import html
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from .api.deps import TOKEN_COOKIE, Caller, SettingsDep, identify
from .core.config import Settings
from .core.errors import ApiError

router = APIRouter(include_in_schema=False)


class LoginRedirect(Exception):
    """Leave the page: to ``location``, storing ``token`` in the cookie if given."""

    def __init__(self, location: str, token: str | None = None) -> None:
        self.location = location
        self.token = token


def _safe_next(target: str | None) -> str:
    # Only paths on this site: "//evil.example" or "https://…" would make /login an open redirect.
    if not target or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


def _redirect(location: str, token: str | None, settings: Settings) -> Response:
    response = RedirectResponse(location, status_code=303)
    if token is not None:
        response.set_cookie(
            TOKEN_COOKIE, token, httponly=True, samesite="strict", path="/", max_age=30 * 86400
        )
    return response


def require_dashboard(request: Request, settings: SettingsDep) -> Caller:
    """The dashboard's reader check: ``?token=`` is moved into the cookie, no access → /login."""
    given = request.query_params.get("token")
    if given is not None and settings.auth_enabled:
        if identify(settings, given) is None:
            raise ApiError(401, "unauthorized", "the token is wrong")
        rest = request.url.remove_query_params("token")
        raise LoginRedirect(rest.path + (f"?{rest.query}" if rest.query else ""), given)
    token = request.cookies.get(TOKEN_COOKIE)
    caller = identify(settings, token)
    if caller is None or (token is None and settings.auth_enabled and not settings.public_read):
        raise LoginRedirect(f"/login?next={quote(request.url.path)}")
    return caller


_FORM = """<!doctype html><html><head><meta charset="utf-8"><title>convtune: sign in</title>
<link rel="stylesheet" href="/static/dashboard.css"></head><body><main>
<h1>convtune</h1><p>{message}</p>
<form method="post" action="/login"><input type="hidden" name="next" value="{next}">
<label>API token <input type="password" name="token" autofocus required></label>
<button type="submit">Open the dashboard</button></form></main></body></html>"""


@router.get("/login", response_class=HTMLResponse)
def login_form(next: str = "/") -> HTMLResponse:
    message = "This service needs its API token (CONVTUNE_API_TOKEN) to show the dashboard."
    return HTMLResponse(_FORM.format(message=message, next=html.escape(_safe_next(next))))


@router.post("/login", response_class=HTMLResponse)
def login(
    settings: SettingsDep,
    token: Annotated[str, Form(max_length=1024)],
    next: Annotated[str, Form(max_length=2048)] = "/",
) -> Response:
    if identify(settings, token) is None:
        body = _FORM.format(message="That token is wrong.", next=html.escape(_safe_next(next)))
        return HTMLResponse(body, status_code=401)
    return _redirect(_safe_next(next), token, settings)


def install_login(app: FastAPI) -> None:
    """The login routes and the handler that turns ``LoginRedirect`` into a 303."""
    app.include_router(router)

    @app.exception_handler(LoginRedirect)
    async def _login_redirect(request: Request, exc: LoginRedirect) -> Response:
        return _redirect(exc.location, exc.token, request.app.state.settings)
