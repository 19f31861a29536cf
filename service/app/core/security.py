"""The API token: ``CONVTUNE_API_TOKEN=auto`` makes one at first start and keeps it on disk."""

from __future__ import annotations

import os
import secrets
import sys

from .config import AUTO_TOKEN, Settings

TOKEN_FILE = "api_token"


def resolve_api_token(settings: Settings, *, announce: bool = False) -> Settings:
    """Settings with ``api_token="auto"`` replaced by the token in ``<data_dir>/api_token``.

    The file is created (mode 0600) with a fresh random token when missing; with ``announce``
    the new token is printed once to stderr, and later starts print where it is kept.
    """
    if settings.api_token != AUTO_TOKEN:
        return settings
    path = settings.data_dir / TOKEN_FILE
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    created = False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        token = path.read_text().strip()
    else:
        token = secrets.token_urlsafe(32)
        with os.fdopen(fd, "w") as out:
            out.write(token + "\n")
        created = True
    if announce:
        if created:
            print(f"convtune: API token (saved in {path}): {token}", file=sys.stderr)
        else:
            print(f"convtune: API token required; it is in {path}", file=sys.stderr)
    return settings.model_copy(update={"api_token": token})
