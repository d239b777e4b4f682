"""Promotions through the REST API without a Triton node: what is refused before anything starts,
one promotion per model at a time (decided by the database, on SQLite and PostgreSQL), history
and its filters."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from control_plane.auth.scopes import Actor, Scope
from control_plane.db import transaction
from control_plane.errors import PromotionInProgress
from control_plane.promotions import service
from control_plane.promotions.schemas import PromotionCreate

MODEL = "/api/v1/models/m"
PROMOTIONS = f"{MODEL}/promotions"
RACERS = 8


@pytest.fixture
def model(client: TestClient, writer: dict[str, str]) -> None:
    assert client.post("/api/v1/models", headers=writer, json={"name": "m"}).status_code == 201
    for _ in range(2):
        assert client.post(f"{MODEL}/versions", headers=writer,
                           json={"source": "hf://org/m"}).status_code == 201
    assert client.post("/api/v1/nodes", headers=writer, json={
        "name": "node-a", "http_url": "http://127.0.0.1:9", "grpc_url": "127.0.0.1:9"}
    ).status_code == 201


def _refused(client: TestClient, headers: dict[str, str], body: dict[str, Any]) -> str:
    response = client.post(PROMOTIONS, headers=headers, json=body)
    assert response.status_code in (404, 409, 422), response.text
    detail: str = response.json()["detail"]
    return detail


def test_what_cannot_start_is_refused_with_the_reason(client: TestClient, writer: dict[str, str],
                                                      model: None) -> None:
    assert "exactly one of version" in _refused(client, writer, {"to": "production"})
    assert "exactly one of version" in _refused(client, writer, {
        "to": "production", "version": 1, "manifest": {"source": "hf://org/m"}})
    assert "runs on no node" in _refused(client, writer, {"to": "production", "version": 1})
    assert "node 'nowhere' is not registered" in _refused(client, writer, {
        "to": "production", "version": 1, "nodes": ["nowhere"]})
    assert "model 'm' has no version 7" in _refused(client, writer, {
        "to": "production", "version": 7, "nodes": ["node-a"]})
    assert "'other', not 'm'" in _refused(client, writer, {
        "to": "production", "nodes": ["node-a"],
        "manifest": {"model": "other", "source": "hf://org/m"}})
    # A manifest's errors name the field, down to the gate.
    detail = _refused(client, writer, {"to": "production", "nodes": ["node-a"], "manifest": {
        "source": "hf://org/m", "gates": {"smoke": [{"prompt": "hi", "expect": {
            "contians": ["x"]}}]}}})
    assert "manifest.gates.smoke.0.expect.contians" in detail
    assert "regex" in _refused(client, writer, {"to": "production", "nodes": ["node-a"],
                                                "manifest": {"source": "hf://org/m", "gates": {
                                                    "smoke": [{"prompt": "hi", "expect": {
                                                        "regex": "("}}]}}})
    client.patch(f"{MODEL}/versions/2", headers=writer, json={"state": "archived"})
    assert "version 2 of 'm' is archived" in _refused(client, writer, {
        "to": "production", "version": 2, "nodes": ["node-a"]})
    assert client.get(PROMOTIONS, headers=writer).json()["total"] == 0, "nothing was recorded"


def _pending(factory: sessionmaker[Session], **body: Any) -> str:
    """A promotion recorded as a POST would, but not submitted: it stays pending."""
    with transaction(factory) as session:
        promotion = service.start(session, Actor(name="ci", scope=Scope.WRITE), "m",
                                  PromotionCreate.model_validate(body))
        return promotion.id


def test_a_second_promotion_of_a_model_gets_409_naming_the_running_one(
        client: TestClient, writer: dict[str, str], model: None,
        session_factory: sessionmaker[Session]) -> None:
    running = _pending(session_factory, version=1, to="production", nodes=["node-a"],
                       ci_run_url="https://ci.example/1", git_sha="abcdef1")
    second = client.post(PROMOTIONS, headers=writer,
                         json={"version": 1, "to": "staging", "nodes": ["node-a"]})
    assert second.status_code == 409
    assert second.json()["error"] == "PromotionInProgress"
    assert running in second.json()["detail"]
    assert second.headers["Location"] == f"/api/v1/promotions/{running}"
    shown = client.get(f"/api/v1/promotions/{running}", headers=writer).json()
    assert (shown["state"], shown["alias"], shown["nodes"], shown["git_sha"]) == \
        ("pending", "production", ["node-a"], "abcdef1")
    assert [s["name"] for s in shown["steps"]] == [
        "register", "deploy_candidate", "gates_candidate", "swap", "gates_served",
        "remove_candidate"]
    listed = client.get(PROMOTIONS, headers=writer, params={"state": "pending"}).json()
    assert [p["id"] for p in listed["items"]] == [running]
    assert client.get(PROMOTIONS, headers=writer, params={"alias": "staging"}).json()["total"] == 0
    assert client.get(PROMOTIONS, headers=writer,
                      params={"ci_run_url": "https://ci.example/1"}).json()["total"] == 1
    missing = client.get(f"/api/v1/promotions/{'0' * 32}", headers=writer)
    assert missing.status_code == 404


def test_racing_promotions_of_one_model_have_exactly_one_winner(
        client: TestClient, model: None, session_factory: sessionmaker[Session]) -> None:
    barrier = threading.Barrier(RACERS)
    outcomes: list[str] = []

    def race(alias: str) -> None:
        barrier.wait()
        try:
            outcomes.append(_pending(session_factory, version=1, to=alias, nodes=["node-a"]))
        except PromotionInProgress as exc:
            outcomes.append(f"409 {exc.running_id}")

    threads = [threading.Thread(target=race, args=(f"a{i}",)) for i in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    winners = [o for o in outcomes if not o.startswith("409")]
    assert len(outcomes) == RACERS and len(winners) == 1, outcomes
    assert outcomes.count(f"409 {winners[0]}") == RACERS - 1
