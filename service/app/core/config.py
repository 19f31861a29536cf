"""Service settings, read from ``CONVTUNE_*`` environment variables.

``CONVTUNE_API_TOKEN``: unset or empty → no authentication (fine on loopback); a value → write
endpoints and downloads need ``Authorization: Bearer <value>``; ``auto`` → ``serve`` generates a
token at first start, keeps it in ``<data_dir>/api_token`` (mode 0600) and prints it.
"""

from __future__ import annotations

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
