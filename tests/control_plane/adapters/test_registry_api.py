"""Adapters registered under a version through the REST API: what registration reads of
adapter_config.json, every refusal with its reason, ETags, idempotent retries and the audit log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from control_plane.registry.sources import local_checksum
from tests.control_plane.adapters.support import LORA_ARGS, VERSION_SOURCE, write_adapter

ADAPTERS = "/api/v1/models/m/versions/1/adapters"


def version(client: TestClient, headers: dict[str, str], engine_args: dict[str, Any],
            source: str = VERSION_SOURCE) -> int:
    if client.get("/api/v1/models/m", headers=headers).status_code == 404:
        assert client.post("/api/v1/models", headers=headers, json={"name": "m"}).status_code \
            == 201
    created = client.post("/api/v1/models/m/versions", headers=headers,
                          json={"source": source, "engine_args": engine_args})
    assert created.status_code == 201, created.text
    number: int = created.json()["number"]
    return number


@pytest.fixture
def lora_version(client: TestClient, writer: dict[str, str]) -> int:
    return version(client, writer, LORA_ARGS)


@pytest.fixture
def adapters_dir(source_root: Path, tmp_path: Path) -> Path:
    """A directory of this test's own under the source root."""
    directory = source_root / f"adapters-{tmp_path.name}"
    directory.mkdir()
    return directory


def test_registration_records_what_adapter_config_says(
        client: TestClient, writer: dict[str, str], lora_version: int,
        adapters_dir: Path) -> None:
    source = write_adapter(adapters_dir / "french", rank=8,
                           target_modules=["v_proj", "q_proj"])
    created = client.post(ADAPTERS, headers=writer,
                          json={"name": "french", "source": str(source)})
    assert created.status_code == 201, created.text
    body = created.json()
    assert {k: v for k, v in body.items() if k != "created_at"} == {
        "model": "m", "version": 1, "name": "french", "source": str(source.resolve()),
        "checksum": local_checksum(source), "rank": 8, "target_modules": ["q_proj", "v_proj"],
        "base_model": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "gates": {"smoke": [], "compare": None}, "created_by": "writer-token"}
    fetched = client.get(f"{ADAPTERS}/french", headers=writer)
    assert fetched.json() == body
    assert fetched.headers["ETag"] == created.headers["ETag"]
    # PEFT also takes one string for target_modules (a pattern, or "all-linear").
    other = write_adapter(adapters_dir / "all", target_modules="all-linear")
    assert client.post(ADAPTERS, headers=writer, json={"name": "all", "source": str(other)}
                       ).json()["target_modules"] == ["all-linear"]
    listed = client.get(ADAPTERS, headers=writer).json()
    assert ([a["name"] for a in listed["items"]], listed["total"]) == (["all", "french"], 2)


def test_the_base_model_matches_on_the_last_path_component_case_insensitively(
        client: TestClient, writer: dict[str, str], adapters_dir: Path) -> None:
    # A local source, and a version served under another name as well.
    version(client, writer, {**LORA_ARGS, "served_model_name": ["chat", "Assistant-v2"]},
            source="s3://bucket/models/smollm2-135m-instruct")
    for name, base in (("hub", "HuggingFaceTB/SmolLM2-135M-Instruct"),
                       ("local", "/data/models/smollm2-135M-INSTRUCT/"),
                       ("served", "org/assistant-V2")):
        source = write_adapter(adapters_dir / name, base_model=base)
        created = client.post(ADAPTERS, headers=writer, json={"name": name, "source": str(source)})
        assert created.status_code == 201, created.text


def test_an_adapter_for_another_base_model_is_refused_naming_what_was_compared(
        client: TestClient, writer: dict[str, str], lora_version: int,
        adapters_dir: Path) -> None:
    source = write_adapter(adapters_dir / "llama", base_model="meta-llama/Llama-3.2-1B")
    refused = client.post(ADAPTERS, headers=writer, json={"name": "llama", "source": str(source)})
    assert refused.status_code == 422
    assert refused.json()["error"] == "InvalidAdapter"
    detail = refused.json()["detail"]
    assert "made for base model 'meta-llama/Llama-3.2-1B'" in detail
    assert "'llama-3.2-1b' with 'smollm2-135m-instruct'" in detail
    assert f"from the version's source '{VERSION_SOURCE}'" in detail
    assert client.get(ADAPTERS, headers=writer).json()["total"] == 0


DEFAULT_LIMIT = ("rank 32 is over the max_lora_rank 16 of version 1 of 'm' (vLLM's default: its "
                 "engine_args do not set it)")
SET_LIMIT = "rank 16 is over the max_lora_rank 8 of version 1 of 'm' (its engine_args)"


@pytest.mark.parametrize("engine_args,rank,expected", [
    # vLLM's own default, 16, when the version does not set max_lora_rank.
    ({"enable_lora": True}, 32, DEFAULT_LIMIT),
    ({**LORA_ARGS, "max_lora_rank": 8}, 16, SET_LIMIT),
])
def test_a_rank_over_the_engines_limit_is_refused(
        client: TestClient, writer: dict[str, str], adapters_dir: Path,
        engine_args: dict[str, Any], rank: int, expected: str) -> None:
    version(client, writer, engine_args)
    source = write_adapter(adapters_dir / "big", rank=rank)
    refused = client.post(ADAPTERS, headers=writer, json={"name": "big", "source": str(source)})
    assert refused.status_code == 422
    assert refused.json()["error"] == "InvalidAdapter"
    assert expected in refused.json()["detail"], refused.json()


def test_a_version_without_enable_lora_is_refused_saying_what_to_set(
        client: TestClient, writer: dict[str, str], adapters_dir: Path) -> None:
    version(client, writer, {"max_model_len": 512})
    source = write_adapter(adapters_dir / "french")
    refused = client.post(ADAPTERS, headers=writer, json={"name": "french", "source": str(source)})
    assert refused.status_code == 422
    assert refused.json()["error"] == "InvalidAdapter"
    assert "set enable_lora, max_loras and max_lora_rank in the version's engine_args" in \
        refused.json()["detail"]


def test_bad_sources_and_configs_are_refused_with_the_reason(
        client: TestClient, writer: dict[str, str], lora_version: int, adapters_dir: Path,
        tmp_path: Path) -> None:
    no_weights = write_adapter(adapters_dir / "no-weights", weights=False)
    no_config = adapters_dir / "no-config"
    no_config.mkdir()
    (no_config / "adapter_model.safetensors").write_bytes(b"\0")
    not_json = write_adapter(adapters_dir / "not-json")
    (not_json / "adapter_config.json").write_text("{r: 8")
    no_rank = write_adapter(adapters_dir / "no-rank", config={
        "target_modules": ["q_proj"], "base_model_name_or_path": "SmolLM2-135M-Instruct"})
    no_base = write_adapter(adapters_dir / "no-base", config={"r": 8,
                                                              "target_modules": ["q_proj"]})
    no_targets = write_adapter(adapters_dir / "no-targets", config={
        "r": 8, "base_model_name_or_path": "SmolLM2-135M-Instruct"})
    a_file = adapters_dir / "file.safetensors"
    a_file.write_bytes(b"\0")
    cases = [
        (str(adapters_dir / "missing"), "InvalidSource", "does not exist"),
        (str(write_adapter(tmp_path / "outside")), "InvalidSource", "outside the allowed roots"),
        ("hf://org/adapter", "InvalidSource", "absolute path of a local adapter directory"),
        ("relative/dir", "InvalidSource", "absolute path of a local adapter directory"),
        (str(a_file), "InvalidSource", "is not a directory"),
        (str(no_weights), "InvalidSource", "has no adapter_model.safetensors"),
        (str(no_config), "InvalidSource", "has no adapter_config.json"),
        (str(not_json), "InvalidAdapter", "cannot be read as JSON"),
        (str(no_rank), "InvalidAdapter", "'r' (the LoRA rank) must be a positive integer"),
        (str(no_base), "InvalidAdapter", "names no 'base_model_name_or_path'"),
        (str(no_targets), "InvalidAdapter", "'target_modules' must name the modules"),
    ]
    for source, error, reason in cases:
        refused = client.post(ADAPTERS, headers=writer, json={"name": "x", "source": source})
        assert (refused.status_code, refused.json()["error"]) == (422, error), (source, refused.text)
        assert reason in refused.json()["detail"], (source, refused.json())
    assert client.get(ADAPTERS, headers=writer).json()["total"] == 0


def test_names_unknown_fields_and_missing_parents(client: TestClient, writer: dict[str, str],
                                                  lora_version: int, adapters_dir: Path) -> None:
    source = str(write_adapter(adapters_dir / "french"))
    assert client.post(ADAPTERS, headers=writer, json={"name": "French!", "source": source}
                       ).status_code == 422
    typo = client.post(ADAPTERS, headers=writer, json={"name": "f", "source": source, "rank": 4})
    assert typo.status_code == 422 and "rank" in typo.json()["detail"]
    assert client.post("/api/v1/models/m/versions/9/adapters", headers=writer,
                       json={"name": "f", "source": source}).json()["error"] == "VersionNotFound"
    assert client.post("/api/v1/models/ghost/versions/1/adapters", headers=writer,
                       json={"name": "f", "source": source}).json()["error"] == "ModelNotFound"
    missing = client.get(f"{ADAPTERS}/ghost", headers=writer)
    assert missing.status_code == 404
    assert missing.json() == {"error": "AdapterNotFound", "detail": (
        "version 1 of model 'm' has no adapter 'ghost'; list them with GET "
        "/api/v1/models/m/versions/1/adapters")}


def test_a_name_is_taken_once_per_version_and_retries_replay(
        client: TestClient, writer: dict[str, str], lora_version: int,
        adapters_dir: Path) -> None:
    source = str(write_adapter(adapters_dir / "french"))
    headers = {**writer, "Idempotency-Key": "adapter-1"}
    first = client.post(ADAPTERS, headers=headers, json={"name": "french", "source": source})
    replay = client.post(ADAPTERS, headers=headers, json={"name": "french", "source": source})
    assert (first.status_code, replay.status_code) == (201, 201)
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json() == first.json() and replay.headers["ETag"] == first.headers["ETag"]
    other_body = client.post(ADAPTERS, headers=headers, json={"name": "other", "source": source})
    assert other_body.status_code == 422 and "already used" in other_body.json()["detail"]
    taken = client.post(ADAPTERS, headers=writer, json={"name": "french", "source": source})
    assert taken.status_code == 409 and taken.json()["error"] == "AdapterAlreadyExists"
    # Another version may have its own adapter of that name.
    version(client, writer, LORA_ARGS)
    assert client.post("/api/v1/models/m/versions/2/adapters", headers=writer,
                       json={"name": "french", "source": source}).status_code == 201


def test_delete_takes_if_match_and_every_change_is_audited(
        client: TestClient, writer: dict[str, str], admin: dict[str, str], lora_version: int,
        adapters_dir: Path) -> None:
    source = str(write_adapter(adapters_dir / "french"))
    created = client.post(ADAPTERS, headers={**writer, "X-Request-ID": "reg-1"},
                          json={"name": "french", "source": source})
    etag = created.headers["ETag"]
    stale = client.delete(f"{ADAPTERS}/french", headers={**writer, "If-Match": '"999.1"'})
    assert stale.status_code == 412 and stale.json()["error"] == "PreconditionFailed"
    assert client.delete(f"{ADAPTERS}/french", headers={**writer, "If-Match": etag}
                         ).status_code == 204
    assert client.get(f"{ADAPTERS}/french", headers=writer).status_code == 404
    assert client.delete(f"{ADAPTERS}/french", headers=writer).status_code == 404

    events = client.get("/api/v1/audit", headers=admin,
                        params={"target": "m/1/french"}).json()["items"]
    assert [(e["action"], e["target_type"], e["actor"]) for e in reversed(events)] == [
        ("adapter.register", "adapter", "writer-token"),
        ("adapter.delete", "adapter", "writer-token")]
    register, delete = reversed(events)
    assert register["request_id"] == "reg-1" and register["after"]["rank"] == 8
    assert delete["before"]["name"] == "french" and delete["after"] is None


def test_reading_needs_read_and_registering_needs_write(
        client: TestClient, reader: dict[str, str], lora_version: int,
        adapters_dir: Path) -> None:
    source = str(write_adapter(adapters_dir / "french"))
    assert client.get(ADAPTERS, headers=reader).status_code == 200
    assert client.post(ADAPTERS, headers=reader, json={"name": "french", "source": source}
                       ).status_code == 403
    assert client.get(ADAPTERS).status_code == 401
