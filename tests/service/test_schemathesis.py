"""Schemathesis against the live API, on SQLite and PostgreSQL: every operation of the OpenAPI
schema (but the endless event stream) with generated valid and invalid requests must answer no
5xx, only documented status codes, and bodies that match the schema."""

from __future__ import annotations

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.models import conv_net, to_bytes
from tests.service.test_models_api import upload

# Per operation and generation mode; bounded so that the whole run takes about a minute.
EXAMPLES = 30
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def property_test(strategy, base_url: str, checks: list):
    """One hypothesis test of an operation: generated requests, each response checked."""

    @hypothesis.given(case=strategy)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: schemathesis.Case) -> None:
        case.call_and_validate(base_url=base_url, checks=checks, timeout=60)

    return run


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_server_error_and_no_schema_mismatch(service, mode):
    with service.client() as client:
        model = upload(client, to_bytes(conv_net(seed=601)))
        assert model.status_code in (200, 201), model.text
        # Ids 1… exist, so generated requests reach past the 404s too.
        client.post(f"/api/models/{model.json()['id']}/jobs", json={"trials_per_task": 2})
    schema = schemathesis.openapi.from_url(f"{service.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    tested = []
    for operation in operations:
        if operation.path.endswith("/events"):
            continue  # an event stream of a job that never ends (no worker here)
        strategy = operation.as_strategy(generation_mode=mode)
        # /healthz answers a documented 503 while generated jobs wait and no worker runs here.
        checks = CHECKS[1:] if operation.path == "/healthz" else CHECKS
        run = property_test(strategy, service.url, checks)
        try:
            run()
        except hypothesis.errors.Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE  # nothing in it can be made invalid
            continue
        tested.append(f"{operation.method.upper()} {operation.path}")
    assert len(tested) >= (9 if mode is GenerationMode.POSITIVE else 7), tested
