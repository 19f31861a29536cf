"""The FastAPI application (``create_app``) and the ``serve`` entry point (API + worker).

``create_app()`` with no argument reads ``CONVTUNE_*`` from the environment, so
``uvicorn --factory convtune.service.app.main:create_app`` works as well.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import version

from fastapi import Depends, FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from convtune.db.migrate import upgrade
from convtune.db.session import make_engine, session_factory
from convtune.service.dashboard import install_dashboard

from .api.main import api_router
from .api.routes import health
from .core.config import Settings
from .core.errors import ApiError, BodyTooLarge, error_body, install_error_handlers
from .core.security import resolve_api_token
from .extraction import Extractor, warm_up
from .login import install_login, require_dashboard
from .store import sweep_orphans
from .upload import FRAMING_ALLOWANCE, upload_too_large

log = logging.getLogger(__name__)

# How long a worker gets to hand its job back to the queue after SIGTERM before it is killed.
_WORKER_STOP_SECONDS = 20.0
_PR_SET_PDEATHSIG = 1


class BodyLimit:
    """Caps every request body (413): uploads at ``max_upload_bytes`` plus their framing and
    form fields, anything else at ``max_body_bytes``; a declared Content-Length is refused
    unread, a chunked body as its bytes arrive."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        is_upload = scope["method"] == "POST" and scope["path"].rstrip("/") == "/api/models"
        if is_upload:
            limit = self.settings.max_upload_bytes + FRAMING_ALLOWANCE
            error = BodyTooLarge(upload_too_large(self.settings.max_upload_bytes))
        else:
            limit = self.settings.max_body_bytes
            error = BodyTooLarge(
                ApiError(
                    413,
                    "body_too_large",
                    f"the request body exceeds {limit} bytes (CONVTUNE_MAX_BODY_BYTES)",
                )
            )
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await JSONResponse(error_body(error.code, error.detail), status_code=413)(
                scope, receive, send
            )
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise error
            return message

        await self.app(scope, limited, send)


def create_app(settings: Settings | None = None) -> FastAPI:
    """An app bound to ``settings`` (default: from the environment); the schema must exist."""
    settings = resolve_api_token(settings or Settings())
    settings.ensure_dirs()
    engine = make_engine(
        settings.resolved_database_url(), busy_timeout=settings.db_busy_timeout_seconds
    )
    sessions = session_factory(engine)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(sweep_orphans, settings, sessions)
        # The forkserver imports TVM once; started now, the first upload does not wait for it.
        threading.Thread(target=warm_up, name="forkserver-warm-up", daemon=True).start()
        yield
        engine.dispose()

    app = FastAPI(
        title="convtune",
        summary="Autotunes the Conv/Gemm kernels of ONNX CNNs with TVM MetaSchedule",
        version=version("convtune"),
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.session_factory = sessions
    app.state.extractor = Extractor(settings.extract_processes, settings.max_extract_seconds)
    app.add_middleware(BodyLimit, settings=settings)
    install_error_handlers(app)
    app.include_router(api_router, prefix="/api")
    app.include_router(health.router)
    install_login(app)
    install_dashboard(app, dependencies=[Depends(require_dashboard)])
    return app


def _die_with_parent() -> None:
    """In the child: get SIGTERM when ``serve`` dies, even by SIGKILL (Linux prctl)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: serve's own cleanup still applies
        pass


def start_worker(settings: Settings) -> subprocess.Popen[bytes]:
    """A ``python -m convtune.service.worker`` child seeing exactly these settings."""
    env = {**os.environ, **settings.to_env()}
    return subprocess.Popen(
        [sys.executable, "-m", "convtune.service.worker"],
        env=env,
        preexec_fn=_die_with_parent if sys.platform == "linux" else None,
    )


def stop_worker(process: subprocess.Popen[bytes], timeout: float = _WORKER_STOP_SECONDS) -> None:
    """SIGTERM (the worker requeues its job), then SIGKILL if it does not exit in time."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


class WorkerSupervisor:
    """Keeps ``count`` worker processes running: one that dies (a crash, the OOM killer, kill -9)
    is started again after a backoff that doubles while restarts keep failing (1 s … 60 s) and
    resets once a worker has lived a minute. Its job goes back to the queue when its heartbeat is
    stale (``stale_after_seconds``) and the new worker resumes it from the recorded trials."""

    BACKOFF_START = 1.0
    BACKOFF_MAX = 60.0
    HEALTHY_AFTER = 60.0

    def __init__(self, settings: Settings, count: int) -> None:
        self.settings = settings
        self.processes = [start_worker(settings) for _ in range(count)]
        self._started = [time.monotonic()] * count
        self._backoff = [self.BACKOFF_START] * count
        self._due: list[float | None] = [None] * count
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="worker-supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            for i, process in enumerate(self.processes):
                self.check(i, process)

    def check(self, i: int, process: subprocess.Popen[bytes]) -> None:
        now = time.monotonic()
        if process.poll() is None:
            if now - self._started[i] > self.HEALTHY_AFTER:
                self._backoff[i] = self.BACKOFF_START
            return
        due = self._due[i]
        if due is None:
            log.warning(
                "worker %d (pid %d) exited with %s; restarting in %.0f s",
                i,
                process.pid,
                process.returncode,
                self._backoff[i],
            )
            self._due[i] = now + self._backoff[i]
            return
        if now < due or self._stop.is_set():
            return
        self.processes[i] = start_worker(self.settings)
        self._started[i] = now
        self._due[i] = None
        self._backoff[i] = min(self._backoff[i] * 2, self.BACKOFF_MAX)
        log.warning("worker %d restarted (pid %d)", i, self.processes[i].pid)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        for process in self.processes:
            stop_worker(process)


def serve(settings: Settings | None = None) -> None:
    """Migrate the database, start and supervise ``settings.workers`` worker processes, run the
    API until interrupted, then stop the workers."""
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = resolve_api_token(settings or Settings(), announce=True)
    settings.ensure_dirs()
    upgrade(settings.resolved_database_url())
    # uvicorn re-raises the SIGTERM it caught once it has shut down; as an exception (not the
    # default handler's instant death) it lets the workers below be stopped.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    supervisor = WorkerSupervisor(settings, settings.workers)
    supervisor.start()
    try:
        uvicorn.run(create_app(settings), host=settings.host, port=settings.port)
    finally:
        supervisor.stop()
