"""Real processes for the service tests: the API (``python -m convtune.service.app``, which
migrates the database and runs uvicorn on a free loopback port) and workers
(``python -m convtune.service.worker``), on SQLite and on PostgreSQL.

``service`` is one API process per test module and backend (starting one costs seconds);
tests that need other settings start their own with ``start_service``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.conftest import postgres_schema

REPO = Path(__file__).resolve().parents[2]
# Small enough that a test can exceed it cheaply, large enough for every test model.
UPLOAD_LIMIT = 200_000
STARTUP_SECONDS = 90.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def database(backend: str, directory: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{directory / 'convtune.db'}"
    else:
        with postgres_schema("svc") as url:
            yield url


def _child_env(settings: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVTUNE_")}
    env.update(settings)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Proc:
    """A child process in its own session (so it and its helpers die together)."""

    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the whole process group: no cleanup, like a crashed machine."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self, timeout: float = 30.0) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
        # Helpers (TVM's builder/runner pools) may outlive a terminated parent.
        self.kill()


def _spawn(module: str, env: dict[str, str], log_path: Path, *args: str) -> Proc:
    log = open(log_path, "ab")  # noqa: SIM115 - the child owns it for its whole life
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        env=_child_env(env),
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    return Proc(process, log_path)


@dataclass
class Service:
    """A running API process and what a test needs to talk to it."""

    url: str
    env: dict[str, str]
    data_dir: Path
    proc: Proc
    workers: list[Proc] = field(default_factory=list)

    def client(self, token: str | None = None, **kwargs) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=120.0, **kwargs)

    def start_worker(self, *args: str, **extra_env: str) -> Proc:
        log_path = self.data_dir.parent / f"worker-{len(self.workers)}.log"
        worker = _spawn("convtune.service.worker", {**self.env, **extra_env}, log_path, *args)
        self.workers.append(worker)
        return worker

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.proc.stop()


def start_service(directory: Path, database_url: str, **settings: str) -> Service:
    """Start the API (no embedded worker) and wait until ``/healthz`` answers."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {
        "CONVTUNE_DATABASE_URL": database_url,
        "CONVTUNE_DATA_DIR": str(directory / "data"),
        "CONVTUNE_HOST": "127.0.0.1",
        "CONVTUNE_PORT": str(port),
        "CONVTUNE_WORKERS": "0",
        "CONVTUNE_MAX_UPLOAD_BYTES": str(UPLOAD_LIMIT),
        "CONVTUNE_POLL_SECONDS": "0.2",
        **{f"CONVTUNE_{k.upper()}": v for k, v in settings.items()},
    }
    proc = _spawn("convtune.service.app", env, directory / "api.log")
    service = Service(f"http://127.0.0.1:{port}", env, directory / "data", proc)
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if proc.process.poll() is not None:
            raise RuntimeError(f"the API exited at start:\n{proc.log()}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{service.url}/healthz", timeout=2).status_code == 200:
                return service
        time.sleep(0.2)
    service.stop()
    raise RuntimeError(f"the API did not answer in {STARTUP_SECONDS} s:\n{proc.log()}")


BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def service(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """An API without authentication, upload limit ``UPLOAD_LIMIT``, on ``backend``."""
    directory = tmp_path_factory.mktemp(f"svc-{backend}")
    with database(backend, directory) as url:
        running = start_service(directory, url)
        try:
            yield running
        finally:
            running.stop()


@pytest.fixture
def client(service: Service) -> Iterator[httpx.Client]:
    with service.client() as http:
        yield http
