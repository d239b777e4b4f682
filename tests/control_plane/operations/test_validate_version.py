"""Validating a version as an operation: 202, poll, and the version becomes validated (or not)."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from control_plane.auth.scopes import Actor, Scope
from control_plane.db import transaction, utcnow
from control_plane.errors import OperationInProgress
from control_plane.operations import service as operations
from control_plane.operations.repository import OperationRepository
from control_plane.operations.service import INTERRUPTED
from control_plane.registry import validation

MODEL = "/api/v1/models/m"


def make_model_dir(root: Path, name: str, *, architecture: str = "LlamaForCausalLM",
                   tokenizer: bool = True, weights: bool = True) -> Path:
    directory = root / name
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(
        {"architectures": [architecture], "max_position_embeddings": 2048}))
    if weights:
        (directory / "model.safetensors").write_bytes(b"\0" * 64)
    if tokenizer:
        (directory / "tokenizer.json").write_text("{}")
    return directory


def wait_finished(client: TestClient, headers: dict[str, str], location: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        operation: dict[str, Any] = client.get(location, headers=headers).json()
        if operation["status"] in ("succeeded", "failed"):
            return operation
        time.sleep(0.05)
    raise AssertionError(f"operation {location} did not finish within 60 s")


def register(client: TestClient, headers: dict[str, str], source: str, **fields: Any) -> int:
    client.post("/api/v1/models", headers=headers, json={"name": "m"})
    created = client.post(f"{MODEL}/versions", headers=headers, json={"source": source, **fields})
    assert created.status_code == 201, created.text
    number: int = created.json()["number"]
    return number


def test_a_good_local_version_becomes_validated(client: TestClient, writer: dict[str, str],
                                                admin: dict[str, str], source_root: Path,
                                                tmp_path: Path) -> None:
    source = make_model_dir(source_root, f"good-{tmp_path.name}")
    number = register(client, writer, str(source), engine_args={"max_model_len": 1024})
    started = client.post(f"{MODEL}/versions/{number}/validate", headers=writer)
    assert started.status_code == 202
    assert started.json()["status"] == "pending"
    assert started.json()["kind"] == "version.validate"
    assert started.headers["Location"] == f"/api/v1/operations/{started.json()['id']}"

    operation = wait_finished(client, writer, started.headers["Location"])
    assert operation["status"] == "succeeded", operation
    assert operation["error"] is None
    assert "checksum matches registration" in operation["result"]["checked"]
    assert "architecture LlamaForCausalLM is supported by vLLM" in operation["result"]["checked"]
    assert operation["started_at"] <= operation["finished_at"]
    assert client.get(f"{MODEL}/versions/{number}", headers=writer).json()["state"] == "validated"
    # Both the request and the change it led to are in the audit log, under the caller's name.
    events = client.get("/api/v1/audit", headers=admin, params={"target": f"m/{number}"}).json()
    actions = [(e["action"], e["actor"]) for e in events["items"]]
    assert actions[:2] == [("version.update", "writer-token"), ("version.validate", "writer-token")]
    assert events["items"][0]["after"]["state"] == "validated"


@pytest.mark.parametrize("change,reason", [
    ("tamper", "the files changed since registration"),
    ("no-tokenizer", "no tokenizer (tokenizer.json, tokenizer.model, tokenizer_config.json)"),
    ("no-weights", "no weight files (.safetensors, .bin, .pt, .gguf)"),
    ("unknown-architecture", "architecture(s) ['NoSuchForCausalLM'] are not supported"),
    ("context", "engine_args.max_model_len 4096 exceeds the model's max_position_embeddings 2048"),
    ("removed", "does not exist or cannot be read"),
])
def test_a_bad_local_version_fails_with_the_reason_and_stays_registered(
        client: TestClient, writer: dict[str, str], source_root: Path, tmp_path: Path,
        change: str, reason: str) -> None:
    source = make_model_dir(
        source_root, f"{change}-{tmp_path.name}", tokenizer=change != "no-tokenizer",
        weights=change != "no-weights",
        architecture="NoSuchForCausalLM" if change == "unknown-architecture" else
        "LlamaForCausalLM")
    engine_args = {"max_model_len": 4096} if change == "context" else {}
    number = register(client, writer, str(source), engine_args=engine_args)
    if change == "tamper":
        (source / "model.safetensors").write_bytes(b"\1" * 64)
    if change == "removed":
        for file in source.iterdir():
            file.unlink()
        source.rmdir()
    started = client.post(f"{MODEL}/versions/{number}/validate", headers=writer)
    operation = wait_finished(client, writer, started.headers["Location"])
    assert operation["status"] == "failed"
    assert reason in operation["error"]
    assert operation["error"].startswith(("version 1 of 'm' is not valid", "local source"))
    assert client.get(f"{MODEL}/versions/{number}", headers=writer).json()["state"] == \
        "registered"


def test_a_remote_version_says_what_was_not_checked(client: TestClient,
                                                    writer: dict[str, str]) -> None:
    number = register(client, writer, "hf://org/m")
    started = client.post(f"{MODEL}/versions/{number}/validate", headers=writer)
    operation = wait_finished(client, writer, started.headers["Location"])
    assert operation["status"] == "succeeded"
    assert operation["result"] == {
        "checked": ["address syntax"],
        "skipped": ["files: a remote source is checked by the node that fetches it"]}


def test_only_a_registered_version_can_be_validated(client: TestClient,
                                                    writer: dict[str, str]) -> None:
    number = register(client, writer, "hf://org/m")
    client.patch(f"{MODEL}/versions/{number}", headers=writer, json={"state": "archived"})
    refused = client.post(f"{MODEL}/versions/{number}/validate", headers=writer)
    assert refused.status_code == 409
    assert refused.json() == {
        "error": "InvalidStateTransition",
        "detail": "version 1 of 'm' is archived; only a registered version can be validated"}
    assert client.get("/api/v1/operations", headers=writer).json()["total"] == 0
    assert client.post(f"{MODEL}/versions/9/validate", headers=writer).status_code == 404


def test_a_retried_start_returns_the_same_operation(client: TestClient,
                                                    writer: dict[str, str]) -> None:
    number = register(client, writer, "hf://org/m")
    headers = {**writer, "Idempotency-Key": "validate-1"}
    first = client.post(f"{MODEL}/versions/{number}/validate", headers=headers)
    retry = client.post(f"{MODEL}/versions/{number}/validate", headers=headers)
    assert retry.status_code == 202
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.json()["id"] == first.json()["id"]
    assert client.get("/api/v1/operations", headers=writer).json()["total"] == 1


def test_operations_are_listed_filtered_and_need_a_token(
        client: TestClient, writer: dict[str, str], reader: dict[str, str]) -> None:
    number = register(client, writer, "hf://org/m")
    started = client.post(f"{MODEL}/versions/{number}/validate", headers=writer).json()
    wait_finished(client, writer, f"/api/v1/operations/{started['id']}")
    listed = client.get("/api/v1/operations", headers=reader,
                        params={"status": "succeeded", "target": "m/1"}).json()
    assert [o["id"] for o in listed["items"]] == [started["id"]]
    assert client.get("/api/v1/operations", headers=reader,
                      params={"status": "failed"}).json()["total"] == 0
    assert client.get("/api/v1/operations").status_code == 401
    missing = client.get(f"/api/v1/operations/{'0' * 32}", headers=reader)
    assert missing.status_code == 404
    assert missing.json()["error"] == "OperationNotFound"
    assert client.get("/api/v1/operations/not-an-id", headers=reader).status_code == 422
    assert client.post(f"{MODEL}/versions/{number}/validate", headers=reader).status_code == 403


def test_what_a_stopped_process_left_pending_runs_in_the_next_one(
        app: FastAPI, session_factory: sessionmaker[Session], writer: dict[str, str]) -> None:
    # Accepted, committed, and the process died before any worker claimed it: the next process
    # to claim work runs it (once), rather than dropping what the caller was promised.
    with transaction(session_factory) as session:
        left = operations.start(session, Actor("gone", Scope.WRITE), validation.KIND, "version",
                                "m/1", {"model": "m", "number": 1})
    with TestClient(app) as restarted:
        operation = wait_finished(restarted, writer, f"/api/v1/operations/{left.id}")
    # It ran: the work's own answer (there is no model m here), not "interrupted".
    assert operation["status"] == "failed" and "'m'" in operation["error"], operation
    with transaction(session_factory) as session:
        row = OperationRepository(session).get(left.id)
        assert row is not None and row.attempts == 1 and row.claimed_by is not None


def test_a_running_operation_whose_process_stopped_beating_is_failed_as_interrupted(
        app: FastAPI, session_factory: sessionmaker[Session], writer: dict[str, str]) -> None:
    lease = app.state.settings.operation_lease_seconds
    beaten = {"dead": utcnow() - timedelta(seconds=lease + 1),
              "alive": utcnow() + timedelta(seconds=3600)}  # a process beating on
    ids = {}
    with transaction(session_factory) as session:
        for name, heartbeat in beaten.items():
            operation = operations.start(session, Actor(name, Scope.WRITE), validation.KIND,
                                         "version", f"m/{name}", {"model": "m", "number": 1},
                                         locks=[f"test:{name}"])
            operation.status, operation.claimed_by = "running", f"host:1:{name}"
            operation.started_at = operation.heartbeat_at = heartbeat
            ids[name] = operation.id
    with TestClient(app) as client:
        dead = wait_finished(client, writer, f"/api/v1/operations/{ids['dead']}")
        alive = client.get(f"/api/v1/operations/{ids['alive']}", headers=writer).json()
    assert dead["status"] == "failed" and dead["error"] == INTERRUPTED, dead
    assert dead["finished_at"] is not None
    assert alive["status"] == "running", alive  # its lease holds: nobody else touches it
    with transaction(session_factory) as session:
        # The interrupted operation's lock went with it; the live one keeps its own.
        assert list(OperationRepository(session).locked("test:")) == ["test:alive"]


def test_one_unfinished_operation_per_resource_whoever_starts_it(
        session_factory: sessionmaker[Session]) -> None:
    # The constraint, not a check in Python, decides: each start runs in its own transaction
    # from its own thread, all at once.
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def start_one(index: int) -> None:
        barrier.wait()
        try:
            with transaction(session_factory) as session:
                operations.start(session, Actor(f"w{index}", Scope.WRITE), validation.KIND,
                                 "version", "m/1", {}, locks=["deployment:race"])
            outcomes.append("started")
        except OperationInProgress as exc:
            assert "deployment:race" in exc.message
            outcomes.append("refused")

    threads = [threading.Thread(target=start_one, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["refused"] * 7 + ["started"], outcomes
