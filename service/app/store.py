"""Turn a streamed upload into a stored, registered model (content-addressed by sha256).

The file lands at ``<data_dir>/models/<sha256>.onnx``: the client's filename only supplies the
display name, after sanitising, and never touches a path.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import PureWindowsPath

from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from convtune.tuner.errors import ConvtuneError
from convtune.tuner.ingest import load_model, parse_input_shape
from convtune.tuner.pipeline import register_model

from . import crud
from .core.config import Settings
from .core.errors import ApiError
from .upload import StreamedUpload

# TVM's frontend and pass infrastructure are not documented as thread-safe: uploads stream in
# parallel, but extraction runs one at a time per process.
_EXTRACT_LOCK = threading.Lock()
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._ -]+")


def display_name(filename: str | None) -> str | None:
    """A harmless model name from a client filename: last path component, no extension."""
    if not filename:
        return None
    # PureWindowsPath splits on both "/" and "\\".
    base = PureWindowsPath(filename).name
    stem = base[:-5] if base.lower().endswith(".onnx") else base
    cleaned = _NAME_CHARS.sub("_", stem).strip(" ._")[:100]
    return cleaned or None


def parse_input_shapes(text: str | None) -> dict[str, tuple[int, ...]]:
    """``"x=1,3,224,224;y=1,10"`` → ``{"x": (1, 3, 224, 224), "y": (1, 10)}``."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in (text or "").split(";"):
        if item.strip():
            name, dims = parse_input_shape(item.strip())
            shapes[name] = dims
    return shapes


def store_upload(
    upload: StreamedUpload,
    *,
    settings: Settings,
    engine: Engine,
    sessions: sessionmaker[Session],
) -> tuple[int, bool]:
    """Register the uploaded model → ``(model id, created)``; known bytes → ``(its id, False)``.

    Raises ``ConvtuneError`` (→ 400) for a model convtune cannot take. Always consumes the temp
    file: moved into the model store, or removed.
    """
    try:
        if upload.size_bytes == 0:
            raise ApiError(400, "empty_file", "the uploaded file is empty")
        shapes = parse_input_shapes(upload.fields.get("input_shapes"))
        with sessions() as session:
            existing = crud.find_model_by_sha(session, upload.sha256)
            if existing is not None:
                _check_same_shapes(existing.id, existing.input_shapes, shapes)
                return existing.id, False
        with _EXTRACT_LOCK:
            # Bytes, not the path: the temp file's random stem must not become the model name.
            data = upload.path.read_bytes()
            ingested = load_model(data, input_shapes=shapes, name=display_name(upload.filename))
            del data
            settings.models_dir.mkdir(parents=True, exist_ok=True)
            dest = settings.models_dir / f"{upload.sha256}.onnx"
            os.replace(upload.path, dest)
            try:
                return register_model(ingested, engine=engine, stored_path=str(dest)), True
            except IntegrityError:
                # The same bytes were registered by a concurrent request (another process).
                with sessions() as session:
                    existing = crud.find_model_by_sha(session, upload.sha256)
                if existing is None:
                    raise
                return existing.id, False
            except ConvtuneError:
                _drop_unreferenced(dest, upload.sha256, sessions)
                raise
    finally:
        upload.discard()


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


def _drop_unreferenced(
    path: os.PathLike[str], sha256: str, sessions: sessionmaker[Session]
) -> None:
    with sessions() as session:
        if crud.find_model_by_sha(session, sha256) is None:
            os.unlink(path)
