"""Fuzzing the OpenAPI schema with schemathesis: no 5xx, nothing the schema does not promise.

Every operation gets a fixed number of generated requests, valid and invalid, sent with an admin
token, on SQLite and on PostgreSQL. The requests go to the app in-process and one at a time: each
transaction commits before its response is sent, so no two requests ever wait on one database lock
(parallel clients on SQLite made an earlier version flaky with "database is locked"). Generation is
derandomized, so a run is reproducible.

The app's lifespan (operation runner, background loops) is started by the first request of a test
and stopped by schemathesis' pytest plugin when the test ends, before the database is emptied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy.orm import Session, sessionmaker

from control_plane.app import create_app
from control_plane.db import transaction
from control_plane.lifecycle import alias_moves
from control_plane.nodes import service as nodes
from control_plane.nodes.schemas import NodeCreate
from control_plane.operations.orm import Operation, OperationStatus
from control_plane.operations.repository import OperationRepository
from control_plane.registry import service as registry
from control_plane.registry import validation
from control_plane.registry.schemas import ModelCreate, VersionCreate
from control_plane.settings import Settings
from control_plane.triton import config_builder
from tests.control_plane.conftest import TEST_ACTOR

EXAMPLES_PER_OPERATION = 15


class AppOfTheTest:
    """The ASGI app schemathesis calls. The schema is loaded at import and each test has its own
    app, so requests (the checks' own probes too) are handed to the app of the running test."""

    def __init__(self) -> None:
        self.app: FastAPI | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.app is None:
            raise RuntimeError("no test has set its app")
        await self.app(scope, receive, send)


# The app's own schema; building it touches no database.
OPENAPI = create_app(Settings(database_url="sqlite://", _env_file=None)  # type: ignore[call-arg]
                     ).openapi()
APP = AppOfTheTest()
SEED_OPERATION_ID = "5eed" * 8
SCHEMA = schemathesis.openapi.from_dict(OPENAPI, config=schemathesis.Config.from_dict({
    "seed": 20240601,
    # Every request is answered in milliseconds; the margin is for a machine busy with other work.
    "request-timeout": 60,
    # The coverage phase sends every boundary case the schema defines, ~250 requests for one
    # operation here; the run stays at EXAMPLES_PER_OPERATION generated requests per operation.
    "phases": {"coverage": {"enabled": False}},
    "generation": {
        # Failing examples are not kept between runs: each run replays the same examples.
        "database": "none",
        # The admin token goes with every request; a generated Authorization would replace it.
        "with-security-parameters": False,
    },
    # Often (valid requests only) the values of the seeded resources, so reads, updates and
    # deletes get past the 404 into their handlers and registrations past the source check.
    "dictionaries": {
        "names": {"values": ["m", "spare"]},
        "numbers": {"values": [1, 2]},
        "aliases": {"values": ["production"]},
        "operations": {"values": [SEED_OPERATION_ID]},
        "sources": {"values": ["hf://org/m", "s3://bucket/m"]},
    },
    "parameters": {
        "path.name": {"dictionary": "names", "probability": 0.6},
        "path.number": {"dictionary": "numbers", "probability": 0.6},
        "path.alias": {"dictionary": "aliases", "probability": 0.6},
        "path.operation_id": {"dictionary": "operations", "probability": 0.6},
        "body.source": {"dictionary": "sources", "probability": 0.6},
        "body.version": {"dictionary": "numbers", "probability": 0.6},
    },
}))
SCHEMA.app = APP

CHECKS = [
    not_a_server_error,
    status_code_conformance,  # every status, errors included, is in the operation's responses
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,  # bodies, error bodies {"error", "detail"} included
    negative_data_rejection,  # a request the schema forbids is refused, not served
    ignored_auth,  # a request that succeeded with the token fails without it
]
# Port 9 (discard) refuses at once, should anything ever dial the seeded node.
SEED_NODE = {"name": "spare", "http_url": "http://127.0.0.1:9", "grpc_url": "127.0.0.1:9",
             "labels": {"gpu": "h100"}}


@pytest.fixture
def seeded(app: FastAPI, source_root: Path) -> None:
    """Model 'm' with versions 1 (hf://org/m) and 2 (local) and alias 'production' on 1; model
    'spare' with nothing (so it can be deleted); node 'spare'; operation SEED_OPERATION_ID."""
    weights = source_root / "fuzz-weights"
    weights.mkdir(exist_ok=True)
    (weights / "model.safetensors").write_bytes(b"weights")
    factory: sessionmaker[Session] = app.state.session_factory
    with transaction(factory) as session:
        registry.create_model(session, TEST_ACTOR, ModelCreate(
            name="m", description="fuzzed", labels={"team": "nlp"}))
        for source in ("hf://org/m", str(weights)):
            # The first registration reads vLLM's engine arguments (a child interpreter, seconds):
            # here rather than inside a generated request.
            registry.register_version(session, TEST_ACTOR, "m", VersionCreate(
                source=source, labels={"commit": "abc"}), [source_root], config_builder.check)
        alias_moves.move_alias(session, TEST_ACTOR, "m", "production", 1)
        registry.create_model(session, TEST_ACTOR, ModelCreate(name="spare"))
        nodes.register_node(session, TEST_ACTOR, NodeCreate.model_validate(SEED_NODE))
        # Stored directly for its fixed id, which the dictionary above names; it is pending, so
        # the app fails it as interrupted when it starts, as it would after a restart.
        OperationRepository(session).add(Operation(
            id=SEED_OPERATION_ID, kind=validation.KIND, target_type="version", target="m/2",
            arguments={"model": "m", "number": 2}, created_by=TEST_ACTOR.name,
            status=OperationStatus.PENDING.value))


@SCHEMA.parametrize()
# The examples of one operation share its test's seeded database (function-scoped fixtures), on
# purpose: a DELETE or PATCH changes what the next example finds, as it would for a real client.
@settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_operation_keeps_to_the_schema(case: schemathesis.Case, app: FastAPI,
                                       admin: dict[str, str], seeded: None) -> None:
    APP.app = app
    case.call_and_validate(headers=dict(admin), checks=CHECKS)


API = sorted((method.upper(), path) for path, operations in OPENAPI["paths"].items()
             if path.startswith("/api/") for method in operations)
SECURED = sorted((method.upper(), path) for path, operations in OPENAPI["paths"].items()
                 for method, operation in operations.items() if operation.get("security"))
PATH_VALUES = {"name": "m", "model": "m", "number": 1, "alias": "production", "node": "spare",
               "operation_id": "0" * 32, "webhook_id": "0" * 32,
               "promotion_id": "0" * 32, "key_id": 1, "deployment_id": 1, "adapter": "a"}


def test_every_operation_without_a_token_is_a_documented_401(client: TestClient) -> None:
    assert SECURED == API, "every API operation declares the bearer token"
    wrong = []
    for method, path in SECURED:
        response = client.request(method, path.format(**PATH_VALUES))
        documented = OPENAPI["paths"][path][method.lower()]["responses"]
        if (response.status_code, response.headers.get("WWW-Authenticate")) != (401, "Bearer") \
                or "401" not in documented or response.json().get("error") != "Unauthorized" \
                or set(response.json()) != {"error", "detail"}:
            wrong.append(f"{method} {path}: {response.status_code} {response.text}")
    assert not wrong, "\n".join(wrong)
