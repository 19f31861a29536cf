"""Turn a streamed upload into a stored, registered model (content-addressed by sha256).

The file lands at ``<data_dir>/models/<sha256>.onnx`` only after its row is committed, so a
failed upload leaves no orphan (``sweep_orphans`` removes those of older versions or crashes at
start). The client's filename only supplies the display name and must not look like a path.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from pathlib import Path, PureWindowsPath

from fastapi.concurrency import run_in_threadpool
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from convtune.db.models import ModelRow
from convtune.tuner.graph.ingest import parse_input_shape

from . import crud
from .core.config import Settings
from .core.errors import ApiError
from .dbbusy import with_retries
from .extract_request import ExtractRequest
from .extraction import Extractor, upload_done
from .limits import ModelLimits, check_storage_quota
from .upload import StreamedUpload

log = logging.getLogger(__name__)

_NAME_CHARS = re.compile(r"[^A-Za-z0-9._ -]+")
# Temp files of uploads older than this are left over from a crash (an upload in flight is
# bounded by max_extract_seconds, far below it).
_STALE_UPLOAD_SECONDS = 3600.0


def display_name(filename: str | None) -> str | None:
    """A harmless model name from a client filename, without extension; path-like names
    (``../../etc/passwd.onnx``, ``C:\\x.onnx``, NUL) are refused (400 ``invalid_filename``)."""
    if not filename:
        return None
    if "\x00" in filename or PureWindowsPath(filename).name != filename or filename == "..":
        raise ApiError(400, "invalid_filename", "the filename must be a plain name, not a path")
    stem = filename[:-5] if filename.lower().endswith(".onnx") else filename
    cleaned = _NAME_CHARS.sub("_", stem).strip(" ._")[:100]
    return cleaned or None


def parse_input_shapes(text: str | None) -> dict[str, tuple[int, ...]]:
    """``"x=1,3,224,224;y=1,10"`` → ``{"x": (1, 3, 224, 224), "y": (1, 10)}``."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in (text or "").split(";"):
        if item.strip():
            name, dims = parse_input_shape(item.strip(), "input_shapes")
            shapes[name] = dims
    return shapes


def stored_path(settings: Settings, sha256: str) -> Path:
    return settings.models_dir / f"{sha256}.onnx"


def _known(
    sessions: sessionmaker[Session],
    settings: Settings,
    upload: StreamedUpload,
    shapes: dict[str, tuple[int, ...]],
) -> int | None:
    """The id of a model with these bytes (its file restored from the upload if it was lost)."""

    def find() -> ModelRow | None:
        with sessions() as session:
            return crud.find_model_by_sha(session, upload.sha256)

    existing = with_retries(find, settings.db_busy_retries)
    if existing is None:
        return None
    _check_same_shapes(existing.id, existing.input_shapes, shapes)
    upload_done(upload.path, stored_path(settings, upload.sha256))
    return existing.id


async def store_upload(
    upload: StreamedUpload,
    *,
    owner: str,
    settings: Settings,
    sessions: sessionmaker[Session],
    extractor: Extractor,
) -> tuple[int, bool]:
    """Register the uploaded model → ``(model id, created)``; known bytes → ``(its id, False)``.

    Raises ``ApiError`` for a model convtune cannot take or a client over its quota. Always
    consumes the temp file: moved into the model store, or removed.
    """
    try:
        if upload.size_bytes == 0:
            raise ApiError(400, "empty_file", "the uploaded file is empty")
        name = display_name(upload.filename)
        shapes = parse_input_shapes(upload.fields.get("input_shapes"))
        known = await run_in_threadpool(_known, sessions, settings, upload, shapes)
        if known is not None:
            return known, False
        pending = extractor.inflight.get(upload.sha256)
        if pending is None:

            def quota() -> None:
                with sessions() as session:
                    check_storage_quota(session, owner, upload.size_bytes, settings)

            await run_in_threadpool(with_retries, quota, settings.db_busy_retries)
            pending = extractor.inflight.get(upload.sha256)
        if pending is not None:
            # The same bytes are being extracted for another request: one extraction serves both
            # (and its refusal, an ApiError, is this request's too).
            try:
                await asyncio.shield(pending)
            except ApiError:
                raise
            except BaseException:
                raise _interrupted() from None
            known = await run_in_threadpool(_known, sessions, settings, upload, shapes)
            if known is None:
                raise _interrupted()
            return known, False
        # No await between the check above and here: extract() registers itself in inflight.
        dest = stored_path(settings, upload.sha256)
        model_id = await extractor.extract(
            ExtractRequest(
                upload_path=str(upload.path),
                stored_path=str(dest),
                sha256=upload.sha256,
                name=name,
                input_shapes=shapes,
                owner=owner,
                database_url=settings.resolved_database_url(),
                busy_timeout=settings.db_busy_timeout_seconds,
                busy_retries=settings.db_busy_retries,
                limits=ModelLimits.of(settings),
            )
        )
        upload_done(upload.path, dest)
        return model_id, True
    finally:
        upload.discard()


def _interrupted() -> ApiError:
    return ApiError(
        503,
        "extraction_interrupted",
        "the concurrent upload of these bytes did not finish; send it again",
        {"Retry-After": "1"},
    )


def _check_same_shapes(
    model_id: int, stored: dict[str, list[int]], asked: dict[str, tuple[int, ...]]
) -> None:
    """A model is stored once per content hash, with the shapes of its first upload."""
    for name, dims in asked.items():
        if name in stored and tuple(stored[name]) != dims:
            raise ApiError(
                409,
                "model_exists",
                f"model {model_id} has these bytes with input {name} pinned to "
                f"{','.join(map(str, stored[name]))}",
            )


def sweep_orphans(settings: Settings, sessions: sessionmaker[Session]) -> list[Path]:
    """Remove model files no row refers to and upload temp files left by a crash; returns them.

    Run at start: a file is only ever renamed into the store after its row committed, so a file
    without a row is a leftover (an older version, a crash), never an upload in progress.
    """
    removed: list[Path] = []
    with sessions() as session:
        known = set(session.scalars(select(ModelRow.sha256)))
    for path in settings.models_dir.glob("*.onnx"):
        if path.stem not in known:
            path.unlink(missing_ok=True)
            removed.append(path)
    cutoff = time.time() - _STALE_UPLOAD_SECONDS
    for path in settings.tmp_dir.glob("upload-*.part"):
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed.append(path)
        except FileNotFoundError:
            pass
    if removed:
        log.warning("removed %d orphan files: %s", len(removed), ", ".join(p.name for p in removed))
    return removed
