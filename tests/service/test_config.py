"""Settings from ``CONVTUNE_*`` and the API token file."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from convtune.service.app.core.config import Settings
from convtune.service.app.core.security import resolve_api_token


def test_defaults_and_environment(monkeypatch, tmp_path):
    for name in ("DATABASE_URL", "DATA_DIR", "API_TOKEN", "WORKERS", "MAX_UPLOAD_BYTES"):
        monkeypatch.delenv(f"CONVTUNE_{name}", raising=False)
    monkeypatch.chdir(tmp_path)
    settings = Settings()
    assert settings.max_upload_bytes == 1 << 30
    assert settings.workers == 1
    assert settings.data_dir == tmp_path / "data"
    assert settings.resolved_database_url() == f"sqlite:///{tmp_path / 'data' / 'convtune.db'}"
    assert not settings.auth_enabled

    monkeypatch.setenv("CONVTUNE_DATA_DIR", "rel")
    monkeypatch.setenv("CONVTUNE_MAX_UPLOAD_BYTES", "1234")
    monkeypatch.setenv("CONVTUNE_API_TOKEN", "")
    monkeypatch.setenv("CONVTUNE_DATABASE_URL", "postgresql+psycopg://u@h/db")
    settings = Settings()
    assert settings.data_dir == tmp_path / "rel"
    assert settings.max_upload_bytes == 1234
    assert settings.api_token is None
    assert settings.resolved_database_url() == "postgresql+psycopg://u@h/db"


def test_invalid_values_are_refused(monkeypatch):
    monkeypatch.setenv("CONVTUNE_MAX_UPLOAD_BYTES", "0")
    with pytest.raises(ValidationError):
        Settings()


def test_to_env_round_trips(monkeypatch, tmp_path):
    original = Settings(data_dir=tmp_path, api_token="t", heartbeat_seconds=0.5, workers=0)
    for key, value in original.to_env().items():
        monkeypatch.setenv(key, value)
    assert Settings() == original.model_copy(
        update={"database_url": original.resolved_database_url()}
    )


def test_auto_token(tmp_path: Path, capsys):
    settings = Settings(data_dir=tmp_path / "d", api_token="auto")
    first = resolve_api_token(settings, announce=True)
    token = first.api_token
    assert token and token != "auto" and first.auth_enabled
    assert token in capsys.readouterr().err
    path = tmp_path / "d" / "api_token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = resolve_api_token(settings, announce=True)
    assert again.api_token == token
    assert token not in capsys.readouterr().err  # printed once, at creation
    assert resolve_api_token(Settings(data_dir=tmp_path, api_token="x")).api_token == "x"
