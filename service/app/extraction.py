"""Ingest and extraction of an upload in a child process, off the API's event loop.

Measured before this module: one process-wide lock held by a 20,000-node model for ~155 s kept
every other upload waiting, and a 200 MB model took the API from 374 MB to 1.27 GB RSS. Now each
upload is checked, ingested, extracted and registered by a child forked from a ``forkserver``
that has TVM loaded already (a fork costs milliseconds, no TVM import per upload); the child is
killed after ``max_extract_seconds``, and whatever memory it took goes with it.

``Extractor`` bounds the children: at most ``extract_processes`` at once and one per client, so
one client's big upload leaves the other slots to others. The same bytes uploaded concurrently
are extracted once; the others wait for that result (``inflight``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
from collections import defaultdict
from pathlib import Path
from typing import Any

from fastapi.concurrency import run_in_threadpool

from .core.errors import ApiError
from .extract_request import ExtractRequest
from .limits import limit_exceeded

log = logging.getLogger(__name__)

# The forkserver imports this module's child side once; every child is a fork of it.
_CHILD_MODULE = "convtune.service.app.extract_child"
_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload([_CHILD_MODULE])


def warm_up() -> None:
    """Start the forkserver (imports TVM, a few seconds) before the first upload needs it."""
    from multiprocessing import forkserver

    forkserver.ensure_running()


def _child_entry(request: ExtractRequest, conn: multiprocessing.connection.Connection) -> None:
    # Imported in the child only (the forkserver has it loaded already): in the API process it
    # would load TVM, ~250 MB of RSS, for nothing.
    from .extract_child import child_main

    child_main(request, conn)


def _run_child(request: ExtractRequest, timeout: float) -> tuple[str, Any]:
    """Blocking: fork a child, wait up to ``timeout`` for its answer, kill it if it is late."""
    receiver, sender = _CONTEXT.Pipe(duplex=False)
    process = _CONTEXT.Process(target=_child_entry, args=(request, sender), daemon=True)
    process.start()
    sender.close()
    try:
        if receiver.poll(timeout):
            try:
                return receiver.recv()
            except EOFError:
                pass  # died before answering: reported below
            process.join(5)
            return ("crashed", process.exitcode)
        return ("timeout", None)
    finally:
        receiver.close()
        if process.is_alive():
            process.kill()
        process.join()
        process.close()


class Extractor:
    """Per-app bookkeeping of extraction children (lives on ``app.state``)."""

    def __init__(self, processes: int, timeout: float) -> None:
        self.timeout = timeout
        self._slots = asyncio.Semaphore(processes)
        self._per_client: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.inflight: dict[str, asyncio.Future[int]] = {}

    async def extract(self, request: ExtractRequest) -> int:
        """The model id the child registered; raises ``ApiError`` with the child's refusal."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.inflight[request.sha256] = future
        try:
            async with self._per_client[request.owner], self._slots:
                log.info("extracting %s for %s", request.sha256[:12], request.owner)
                kind, value = await run_in_threadpool(_run_child, request, self.timeout)
            model_id = self._result(kind, value)
        except BaseException as exc:
            future.set_exception(exc)
            # Retrieved here so that a future nobody awaited does not log "never retrieved".
            with contextlib.suppress(BaseException):
                future.exception()
            raise
        else:
            future.set_result(model_id)
            return model_id
        finally:
            self.inflight.pop(request.sha256, None)

    def _result(self, kind: str, value: Any) -> int:
        if kind == "ok":
            return int(value)
        if kind == "error":
            status, code, message, headers = value
            raise ApiError(status, code, message, headers)
        if kind == "timeout":
            raise limit_exceeded(
                "checking and extracting this model took longer than",
                f"{self.timeout:g} s;",
                "max_extract_seconds",
                f"{self.timeout:g} s",
            )
        raise ApiError(
            422,
            "extraction_crashed",
            f"extracting the model's tasks crashed the extractor (exit code {value})",
        )


def upload_done(upload_path: Path, stored_path: Path) -> None:
    """Move the upload to its content address once its row is committed (a crash before leaves a
    row without file, restored by the next upload of the same bytes; never a file without row)."""
    if stored_path.exists():
        upload_path.unlink(missing_ok=True)
    else:
        stored_path.parent.mkdir(parents=True, exist_ok=True)
        upload_path.replace(stored_path)
