"""A version's serving settings and Triton config overrides, through the REST API."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction
from control_plane.registry.orm import ModelVersion

VERSIONS = "/api/v1/models/m/versions"


@pytest.fixture
def model(client: TestClient, writer: dict[str, str]) -> str:
    assert client.post("/api/v1/models", headers=writer, json={"name": "m"}).status_code == 201
    return "m"


def test_defaults_are_stored_written_out(client: TestClient, writer: dict[str, str],
                                         model: str) -> None:
    body = client.post(VERSIONS, headers=writer, json={"source": "hf://org/m"}).json()
    assert body["serving"]["priority_levels"] == 3
    assert body["serving"]["default_queue_policy"] == {
        "timeout_action": "REJECT", "default_timeout_microseconds": 120_000_000,
        "allow_timeout_override": True, "max_queue_size": 256}
    assert set(body["serving"]["priority_queue_policies"]) == {"1", "2"}
    assert body["triton_config"] == {}


def test_settings_and_overrides_reach_the_rendered_config(
        client: TestClient, writer: dict[str, str], model: str) -> None:
    created = client.post(VERSIONS, headers=writer, json={
        "source": "hf://org/m", "engine_args": {"max_num_seqs": 6},
        "serving": {"priority_levels": 2, "priority_queue_policies": {"1": {"max_queue_size": 4}},
                    "max_inflight_requests": 5},
        "triton_config": {"parameters": {"tenant": {"string_value": "research"}},
                          "dynamic_batching": {"max_queue_delay_microseconds": 100}}})
    assert created.status_code == 201, created.text
    assert created.json()["serving"]["default_priority_level"] is None
    config = client.get(f"{VERSIONS}/1/config", headers=writer)
    assert config.status_code == 200
    body = config.json()
    assert (body["name"], body["backend"]) == ("m", "llm_vllm")
    assert body["model_transaction_policy"] == {"decoupled": True}
    # Levels and queue policies go to the backend's queue; Triton's batcher keeps prefetching.
    assert body["dynamic_batching"] == {"max_queue_delay_microseconds": "100"}
    assert {key: value["string_value"] for key, value in body["parameters"].items()} == {
        "priority_levels": "2", "default_priority_level": "2",
        "default_queue_policy": '{"timeout_action":"REJECT","default_timeout_microseconds":'
                                '120000000,"allow_timeout_override":true,"max_queue_size":256}',
        "priority_queue_policy.1": '{"timeout_action":"REJECT","default_timeout_microseconds":0,'
                                   '"allow_timeout_override":true,"max_queue_size":4}',
        "max_inflight_requests": "5", "reserved_urgent_slots": "1",
        "urgent_priority_level": "1", "drain_timeout_seconds": "30",
        "REPORT_CUSTOM_METRICS": "true", "fair_share_preemption": "true", "tenant": "research"}
    assert body["input"][0]["name"] == "text_input"


def test_a_config_the_backend_would_refuse_is_refused_and_nothing_is_stored(
        client: TestClient, writer: dict[str, str], model: str) -> None:
    refused = client.post(VERSIONS, headers=writer, json={
        "source": "hf://org/m", "engine_args": {"max_num_seqs": 2},
        "serving": {"reserved_urgent_slots": 2}})
    assert refused.status_code == 422
    assert refused.json() == {
        "error": "InvalidTritonConfig",
        "detail": "serving.reserved_urgent_slots 2 leaves none of the 2 engine slots for "
                  "levels above 1"}
    owned = client.post(VERSIONS, headers=writer, json={
        "source": "hf://org/m", "triton_config": {"instance_group": [{"count": 2}]}})
    assert owned.status_code == 422
    assert "'instance_group' cannot be overridden" in owned.json()["detail"]
    prefetch_off = client.post(VERSIONS, headers=writer, json={
        "source": "hf://org/m", "triton_config": {"dynamic_batching": {"priority_levels": 2}}})
    assert prefetch_off.status_code == 422
    assert prefetch_off.json() == {
        "error": "InvalidTritonConfig",
        "detail": "triton_config: 'dynamic_batching.priority_levels' turns off Triton's payload "
                  "prefetching (requests then stall ~500 ms): set serving.priority_levels "
                  "instead, which the backend's queue enforces"}
    level_policy = client.post(VERSIONS, headers=writer, json={
        "source": "hf://org/m",
        "triton_config": {"parameters": {"priority_queue_policy.1": {"string_value": "{}"}}}})
    assert level_policy.status_code == 422
    assert level_policy.json()["detail"] == (
        "triton_config: 'parameters.priority_queue_policy.1' is set through "
        "serving.priority_queue_policies")
    unknown = client.post(VERSIONS, headers=writer, json={
        "source": "hf://org/m", "triton_config": {"dynamic_batching": {"prefered": 1}}})
    assert unknown.status_code == 422
    assert "has no field named \"prefered\"" in unknown.json()["detail"]
    inconsistent = client.post(VERSIONS, headers=writer, json={
        "source": "hf://org/m", "serving": {"priority_levels": 1}})
    assert inconsistent.status_code == 422
    assert "priority_queue_policies names level(s) [2] beyond priority_levels 1" in \
        inconsistent.text
    assert client.get(VERSIONS, headers=writer).json()["total"] == 0


def test_a_version_stored_with_the_retired_batcher_wakeup_parameter_still_renders(
        client: TestClient, writer: dict[str, str], model: str,
        session_factory: sessionmaker[Session]) -> None:
    client.post(VERSIONS, headers=writer, json={"source": "hf://org/m"})
    # What a version registered while the backend had batcher wake-ups may carry.
    with transaction(session_factory) as session:
        session.execute(update(ModelVersion).values(
            triton_config={"parameters": {"batcher_wakeup": {"string_value": "false"}}}))
    config = client.get(f"{VERSIONS}/1/config", headers=writer)
    assert config.status_code == 200, config.text
    assert config.json()["parameters"]["batcher_wakeup"] == {"string_value": "false"}
    assert config.json()["dynamic_batching"] == {}


def test_settings_are_immutable(client: TestClient, writer: dict[str, str], model: str) -> None:
    client.post(VERSIONS, headers=writer, json={"source": "hf://org/m"})
    refused = client.patch(f"{VERSIONS}/1", headers=writer,
                           json={"serving": {"priority_levels": 1}})
    assert refused.status_code == 422
    assert client.get(f"{VERSIONS}/1", headers=writer).json()["serving"]["priority_levels"] == 3


def test_config_of_a_missing_version_is_404(client: TestClient, writer: dict[str, str],
                                            model: str) -> None:
    missing = client.get(f"{VERSIONS}/7/config", headers=writer)
    assert missing.status_code == 404
    assert missing.json() == {"error": "VersionNotFound", "detail": "model 'm' has no version 7"}
