"""One place decides how an alias moves: a deployed alias moves only through a swap, whoever asks
(the API, the demo deployment, a rollback), and nothing else in the code writes an alias move."""

from __future__ import annotations

import ast

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from control_plane import demo_deployment
from control_plane.db import transaction
from control_plane.operations.runner import OperationRunner
from control_plane.registry import aliases
from control_plane.triton.runtime import PROJECT_ROOT
from tests.control_plane.conftest import TEST_ACTOR
from tests.control_plane.deployments.support import finished

MODEL = "/api/v1/models/m"
PRODUCTION = f"{MODEL}/aliases/production"
WRITERS_OF_MOVES = {"control_plane/lifecycle/alias_moves.py"}


def _calls_of(name: str) -> dict[str, int]:
    """Files under control_plane/ that use ``name`` (a call or a reference), with counts."""
    found: dict[str, int] = {}
    for path in (PROJECT_ROOT / "control_plane").rglob("*.py"):
        tree = ast.parse(path.read_text())
        uses = sum(1 for node in ast.walk(tree)
                   if (isinstance(node, ast.Attribute) and node.attr == name) or
                   (isinstance(node, ast.Name) and node.id == name) or
                   (isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names)))
        if uses:
            found[str(path.relative_to(PROJECT_ROOT))] = uses
    return found


def test_only_the_lifecycle_service_writes_alias_moves() -> None:
    assert set(_calls_of("record_move")) == WRITERS_OF_MOVES
    # The move row itself is built in one place, behind record_move.
    assert set(_calls_of("AliasMove")) == {"control_plane/registry/aliases.py",
                                           "control_plane/registry/repository.py",
                                           "control_plane/registry/schemas.py"}
    source = (PROJECT_ROOT / "control_plane/registry/aliases.py").read_text()
    assert source.count("AliasMove(") == 1


@pytest.fixture
def deployed_on_a_node(client: TestClient, writer: dict[str, str]) -> None:
    """Model m with versions 1-3, production on version 1, deployed (wanted) on local, a node
    where nothing listens: what counts here is only that the alias is deployed."""
    assert client.post("/api/v1/models", headers=writer, json={"name": "m"}).status_code == 201
    for _ in range(3):
        assert client.post(f"{MODEL}/versions", headers=writer,
                           json={"source": "hf://org/m"}).status_code == 201
    assert client.put(PRODUCTION, headers=writer, json={"version": 1}).status_code == 200
    assert client.post("/api/v1/nodes", headers=writer, json={
        "name": "local", "http_url": "http://127.0.0.1:9", "grpc_url": "127.0.0.1:9"}
    ).status_code == 201
    _apply_and_wait(client, writer)


def _apply_and_wait(client: TestClient, writer: dict[str, str]) -> None:
    # Its load fails (nothing listens); moves are refused while an operation works on it.
    finished(client, writer, client.put(f"{PRODUCTION}/deployments/local", headers=writer))


def _version(client: TestClient, headers: dict[str, str], alias: str = "production") -> int:
    number: int = client.get(f"{MODEL}/aliases/{alias}", headers=headers).json()["version"]
    return number


def test_a_deployed_alias_moves_by_a_swap_and_an_undeployed_one_at_once(
        client: TestClient, writer: dict[str, str], deployed_on_a_node: None) -> None:
    swap = client.put(PRODUCTION, headers=writer, json={"version": 2})
    assert swap.status_code == 202 and swap.json()["kind"] == "alias.swap"
    assert swap.json()["arguments"]["from_version"] == 1
    assert _version(client, writer) == 1, "the alias moves only once every node serves v2"
    staging = client.put(f"{MODEL}/aliases/staging", headers=writer, json={"version": 3})
    assert staging.status_code == 200 and staging.json()["version"] == 3
    refused = client.delete(PRODUCTION, headers=writer)
    assert refused.status_code == 409 and "is deployed" in refused.json()["detail"]


def test_the_demo_never_moves_an_alias_an_operator_moved(
        client: TestClient, writer: dict[str, str], deployed_on_a_node: None,
        session_factory: sessionmaker[Session]) -> None:
    # An operator's move of production to v2 (done here without Triton: the undeployed move).
    finished(client, writer, client.delete(f"{PRODUCTION}/deployments/local", headers=writer))
    with transaction(session_factory) as session:
        aliases.record_move(session, TEST_ACTOR, "m", "production", 2)
    _apply_and_wait(client, writer)
    runner = OperationRunner(session_factory)  # no work registered: its operations just fail
    runner.start()
    try:
        # `make serve` starts again and finds the demo's version 1 already registered.
        outcome = demo_deployment.deploy(session_factory, runner, "m", 1,
                                         newly_registered=False, timeout_s=30)
        assert outcome["status"] == "failed"  # the apply ran (and failed: no work here)
        assert _version(client, writer) == 2, "production stays where the operator put it"
        # A new demo version (the shipped model changed) moves production, through a swap.
        outcome = demo_deployment.deploy(session_factory, runner, "m", 3,
                                         newly_registered=True, timeout_s=30)
    finally:
        runner.shutdown()
    operation = client.get(f"/api/v1/operations/{outcome['id']}", headers=writer).json()
    assert operation["kind"] == "alias.swap"
    assert (operation["arguments"]["from_version"], operation["arguments"]["to_version"]) == (2, 3)
    assert _version(client, writer) == 2, "a failed swap leaves the alias where it was"


def test_rollback_goes_back_through_the_history_and_refuses_with_a_reason(
        client: TestClient, writer: dict[str, str], admin: dict[str, str]) -> None:
    assert client.post("/api/v1/models", headers=writer, json={"name": "m"}).status_code == 201
    for _ in range(3):
        client.post(f"{MODEL}/versions", headers=writer, json={"source": "hf://org/m"})
    client.put(PRODUCTION, headers=writer, json={"version": 1})
    nothing = client.post(f"{PRODUCTION}/rollback", headers=writer, json={})
    assert nothing.status_code == 409
    assert "no earlier version to go back to" in nothing.json()["detail"]
    client.put(PRODUCTION, headers=writer, json={"version": 2})
    back = client.post(f"{PRODUCTION}/rollback", headers=writer, json={})
    assert back.status_code == 200 and back.json()["version"] == 1
    # The previous version is now 2 (the rollback was a move too); archived, it cannot return.
    assert client.patch(f"{MODEL}/versions/2", headers=writer,
                        json={"state": "archived"}).status_code == 200
    archived = client.post(f"{PRODUCTION}/rollback", headers=writer, json={})
    assert archived.status_code == 409 and "version 2 of 'm' is archived" in \
        archived.json()["detail"]
    explicit = client.post(f"{PRODUCTION}/rollback", headers=writer, json={"to": 3})
    assert explicit.status_code == 200 and explicit.json()["version"] == 3
    gone = client.post(f"{PRODUCTION}/rollback", headers=writer, json={"to": 9})
    assert gone.status_code == 409 and "version 9 of 'm' no longer exists" in gone.json()["detail"]
    events = client.get("/api/v1/audit", headers=admin, params={"action": "alias.rollback"})
    assert [(e["before"]["version"], e["after"]["version"]) for e in events.json()["items"]] == \
        [(1, 3), (2, 1)]


def test_rollback_of_a_deployed_alias_is_a_swap(
        client: TestClient, writer: dict[str, str], deployed_on_a_node: None,
        session_factory: sessionmaker[Session]) -> None:
    finished(client, writer, client.delete(f"{PRODUCTION}/deployments/local", headers=writer))
    with transaction(session_factory) as session:
        aliases.record_move(session, TEST_ACTOR, "m", "production", 2)
    _apply_and_wait(client, writer)
    swap = client.post(f"{PRODUCTION}/rollback", headers=writer, json={})
    assert swap.status_code == 202 and swap.json()["kind"] == "alias.swap"
    assert swap.json()["arguments"]["to_version"] == 1
    assert _version(client, writer) == 2

