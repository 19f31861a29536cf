"""The child side of ``extraction``: check, ingest, extract and register one uploaded model.

Imported by the forkserver once (with TVM), so each child starts warm. It answers through a pipe
with ``("ok", model_id)`` or ``("error", (status, code, message, headers))``.
"""

from __future__ import annotations

import os
import traceback
from multiprocessing.connection import Connection
from typing import Any

import onnx
from sqlalchemy import update

from convtune.db.models import ModelRow
from convtune.db.session import make_engine, session_factory
from convtune.tuner.errors import ConvtuneError
from convtune.tuner.graph.ingest import load_model
from convtune.tuner.pipeline import register_model

from . import crud
from .core.errors import ApiError, convtune_error_code
from .dbbusy import with_retries
from .extract_request import ExtractRequest
from .limits import check_model

_NODES_PER_NICE_STEP = 100


def _register(request: ExtractRequest) -> int:
    with open(request.upload_path, "rb") as handle:
        try:
            raw: onnx.ModelProto | None = onnx.load_model_from_string(handle.read())
        except Exception:  # not ONNX: ingest refuses it in its own words below
            raw = None
    if raw is not None:
        # Before ingest: ingest folds constants, and a tiny model may fold into gigabytes.
        nodes = check_model(raw, request.limits)
        del raw
        # Extraction time grows with the graph (2,000 Relus: 11 s): a big graph yields the CPU
        # to the small uploads of others running next to it.
        os.nice(min(19, nodes // _NODES_PER_NICE_STEP))
    ingested = load_model(
        request.upload_path,
        input_shapes=request.input_shapes,
        name=request.name,
        shape_option="input_shapes",  # an HTTP client sets the form field, not the CLI flag
    )
    engine = make_engine(request.database_url, busy_timeout=request.busy_timeout)
    sessions = session_factory(engine)
    try:

        def store() -> int:
            with sessions() as session:
                known = crud.find_model_by_sha(session, request.sha256)
            model_id = register_model(ingested, engine=engine, stored_path=request.stored_path)
            if known is None:
                with sessions() as session:
                    session.execute(
                        update(ModelRow).where(ModelRow.id == model_id).values(owner=request.owner)
                    )
                    session.commit()
            return model_id

        return with_retries(store, request.busy_retries)
    finally:
        engine.dispose()


def child_main(request: ExtractRequest, conn: Connection) -> None:
    answer: tuple[str, Any]
    try:
        answer = ("ok", _register(request))
    except ApiError as exc:
        answer = ("error", (exc.status, exc.code, exc.message, exc.headers))
    except ConvtuneError as exc:
        answer = ("error", (exc.http_status, convtune_error_code(exc), exc.message, None))
    except onnx.checker.ValidationError as exc:
        answer = ("error", (400, "invalid_model", str(exc).splitlines()[0][:300], None))
    except Exception as exc:
        traceback.print_exc()
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        answer = ("error", (422, "extraction_failed", f"{type(exc).__name__}: {first}", None))
    conn.send(answer)
    conn.close()
