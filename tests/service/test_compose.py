"""docker-compose.yml and Dockerfile describe a runnable deployment."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def load() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_services_and_their_order():
    services = load()["services"]
    assert set(services) == {"postgres", "migrate", "api", "worker", "tracker", "rpc"}
    assert services["postgres"]["healthcheck"]["test"]
    for name in ("api", "worker", "migrate"):
        depends = services[name]["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy"
    for name in ("api", "worker"):
        assert services[name]["depends_on"]["migrate"]["condition"] == (
            "service_completed_successfully"
        )
    assert services["migrate"]["command"] == ["convtune", "db", "upgrade"]
    assert services["api"]["command"] == ["convtune", "serve"]
    assert services["worker"]["command"] == ["convtune", "worker"]


def test_every_convtune_service_shares_database_and_data():
    services = load()["services"]
    pg = services["postgres"]["environment"]
    expected_url = (
        f"postgresql+psycopg://{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}"
        f"@postgres:5432/{pg['POSTGRES_DB']}"
    )
    for name in ("migrate", "api", "worker"):
        env = services[name]["environment"]
        assert env["CONVTUNE_DATABASE_URL"] == expected_url
        assert env["CONVTUNE_DATA_DIR"] == "/data"
    for name in ("api", "worker"):
        assert "data:/data" in services[name]["volumes"]
    # The API must not start its own worker next to the worker service.
    assert services["api"]["environment"]["CONVTUNE_WORKERS"] == "0"
    assert services["api"]["environment"]["CONVTUNE_HOST"] == "0.0.0.0"
    assert any(str(p).endswith(":8000") for p in services["api"]["ports"])


def test_dockerfile_installs_the_package_and_serves():
    text = (REPO / "Dockerfile").read_text()
    assert "FROM python:3.11" in text
    # Dependencies in a layer of their own, before the code: a code change reuses it.
    assert text.index("pip install -r /tmp/requirements.txt") < text.index("COPY tuner/")
    assert "pip install --no-deps ." in text
    for package_dir in ("tuner/", "schedules/", "db/", "service/"):
        assert f"COPY {package_dir}" in text
    assert 'CMD ["convtune", "serve"]' in text
    assert "/healthz" in text
