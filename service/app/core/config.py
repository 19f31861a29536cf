"""Service settings, read from ``CONVTUNE_*`` environment variables.

``CONVTUNE_API_TOKEN``: unset or empty → no authentication (fine on loopback); a value → every
endpoint but ``/healthz`` needs ``Authorization: Bearer <value>`` (reads too, unless
``CONVTUNE_PUBLIC_READ=true``); ``auto`` → ``serve`` generates a token at first start, keeps it in
``<data_dir>/api_token`` (mode 0600) and prints it. ``CONVTUNE_CLIENT_TOKENS`` adds more write
tokens and ``CONVTUNE_READ_TOKENS`` read-only ones (comma-separated); each token is one client for
the quotas and the fair queue, and everyone without a token is the one client ``anonymous``.

The ``max_*`` settings are the server's limits; a request over one is refused with 422 naming the
limit and its ``CONVTUNE_*`` variable (``limit_exceeded``), see ``limits.py``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

AUTO_TOKEN = "auto"


class Settings(BaseSettings):
    """Everything the API and the workers need; one instance is shared by a process."""

    model_config = SettingsConfigDict(env_prefix="CONVTUNE_", extra="ignore")

    # Empty → SQLite file under data_dir (see ``resolved_database_url``).
    database_url: str = ""
    # Same default as ``convtune.db.session.data_dir``: ./data.
    data_dir: Path = Path("data")
    api_token: str | None = None
    max_upload_bytes: int = Field(default=1 << 30, gt=0)
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    # Worker processes ``serve`` starts next to the API; 0 → run them elsewhere.
    workers: int = Field(default=1, ge=0)
    heartbeat_seconds: float = Field(default=5.0, gt=0)
    # A running job whose heartbeat is older than this goes back to the queue; must exceed the
    # heartbeat period by a wide margin or a slow but alive worker loses its job.
    stale_after_seconds: float = Field(default=60.0, gt=0)
    # After this many claims a job that keeps dying (its worker killed each time) is failed.
    max_attempts: int = Field(default=3, ge=1)
    # How often an idle worker and the SSE stream look at the database.
    poll_seconds: float = Field(default=1.0, gt=0)

    # --- who may do what -------------------------------------------------------------------
    # Reads without a token while one is set: only when said explicitly.
    public_read: bool = False
    # Comma-separated: more write tokens (one client each) and read-only tokens.
    client_tokens: str = ""
    read_tokens: str = ""

    # --- limits of one job (422 beyond) -------------------------------------------------------
    max_trials_per_task: int = Field(default=4096, ge=1)
    # A job's search budget; a job that gives none is still bounded by max_job_minutes.
    max_budget_minutes: float = Field(default=12 * 60, gt=0, allow_inf_nan=False)
    max_threads: int = Field(default=256, ge=1)
    # Wall-clock cap of one job attempt, enforced by the worker: the search stops there and the
    # artifact is built from what was measured.
    max_job_minutes: float = Field(default=13 * 60, gt=0, allow_inf_nan=False)

    # --- limits of one model (422 beyond) -----------------------------------------------------
    max_model_nodes: int = Field(default=20_000, ge=1)
    # Elements of any one tensor (weights, constants, inferred intermediates): 2^28 fp32 = 1 GiB.
    max_tensor_elements: int = Field(default=1 << 28, ge=1)
    # Ingest + extraction of one upload runs in a child process killed after this long.
    max_extract_seconds: float = Field(default=300.0, gt=0, allow_inf_nan=False)
    # Child processes extracting at once (each client gets at most one of them at a time).
    extract_processes: int = Field(default=2, ge=1)

    # --- per-client quotas (429 beyond) -------------------------------------------------------
    max_queued_jobs_per_client: int = Field(default=16, ge=1)
    max_stored_bytes_per_client: int = Field(default=16 << 30, ge=1)
    # Any request body but an upload (JSON job options): 413 beyond.
    max_body_bytes: int = Field(default=64 * 1024, ge=1024)

    # --- a busy database ----------------------------------------------------------------------
    # How long one statement of the API waits for a lock, and how often a write is retried,
    # before the request answers 503 with Retry-After.
    db_busy_timeout_seconds: float = Field(default=5.0, gt=0, allow_inf_nan=False)
    db_busy_retries: int = Field(default=3, ge=0)

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        # Absolute, so a worker started from another directory finds the same files.
        return value.expanduser().resolve()

    @field_validator("api_token")
    @classmethod
    def _empty_token_is_none(cls, value: str | None) -> str | None:
        return value or None

    @property
    def auth_enabled(self) -> bool:
        return self.api_token is not None

    def write_tokens(self) -> list[str]:
        tokens = [self.api_token] if self.api_token else []
        return tokens + _split(self.client_tokens)

    def read_only_tokens(self) -> list[str]:
        return _split(self.read_tokens)

    def resolved_database_url(self) -> str:
        """The configured URL, else a SQLite file in ``data_dir``."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'convtune.db').resolve()}"

    @property
    def models_dir(self) -> Path:
        return self.data_dir / "models"

    @property
    def artifacts_dir(self) -> Path:
        return self.data_dir / "artifacts"

    @property
    def tmp_dir(self) -> Path:
        return self.data_dir / "tmp"

    @property
    def lock_path(self) -> Path:
        return self.data_dir / "measure.lock"

    def ensure_dirs(self) -> None:
        for path in (self.data_dir, self.models_dir, self.artifacts_dir, self.tmp_dir):
            path.mkdir(parents=True, exist_ok=True)

    def to_env(self) -> dict[str, str]:
        """The settings as ``CONVTUNE_*`` variables, so a child process sees the same ones."""
        env: dict[str, str] = {}
        for name, value in self.model_dump().items():
            if value is not None:
                env[f"CONVTUNE_{name.upper()}"] = str(value)
        env["CONVTUNE_DATABASE_URL"] = self.resolved_database_url()
        return env


def _split(tokens: str) -> list[str]:
    return [t.strip() for t in tokens.split(",") if t.strip()]


def client_id(token: str | None) -> str:
    """The quota and scheduling identity of a request: a digest of its token (never the token
    itself, which would leak through job listings), or ``anonymous``."""
    if not token:
        return ANONYMOUS
    return "token-" + hashlib.sha256(token.encode()).hexdigest()[:16]


ANONYMOUS = "anonymous"
