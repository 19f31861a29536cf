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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import version

from fastapi import FastAPI

from convtune.db.migrate import upgrade
from convtune.db.session import make_engine, session_factory
from convtune.service.dashboard import install_dashboard

from .api.main import api_router
from .api.routes import health
from .core.config import Settings
from .core.errors import install_error_handlers
from .core.security import resolve_api_token

log = logging.getLogger(__name__)

# How long a worker gets to hand its job back to the queue after SIGTERM before it is killed.
_WORKER_STOP_SECONDS = 20.0
_PR_SET_PDEATHSIG = 1


def create_app(settings: Settings | None = None) -> FastAPI:
    """An app bound to ``settings`` (default: from the environment); the schema must exist."""
    settings = resolve_api_token(settings or Settings())
    settings.ensure_dirs()
    engine = make_engine(settings.resolved_database_url())

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
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
    app.state.session_factory = session_factory(engine)
    install_error_handlers(app)
    app.include_router(api_router, prefix="/api")
    app.include_router(health.router)
    install_dashboard(app)
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


def serve(settings: Settings | None = None) -> None:
    """Migrate the database, start ``settings.workers`` worker processes, run the API until
    interrupted, then stop the workers."""
    import uvicorn

    settings = resolve_api_token(settings or Settings(), announce=True)
    settings.ensure_dirs()
    upgrade(settings.resolved_database_url())
    # uvicorn re-raises the SIGTERM it caught once it has shut down; as an exception (not the
    # default handler's instant death) it lets the workers below be stopped.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    workers = [start_worker(settings) for _ in range(settings.workers)]
    try:
        uvicorn.run(create_app(settings), host=settings.host, port=settings.port)
    finally:
        for process in workers:
            stop_worker(process)
