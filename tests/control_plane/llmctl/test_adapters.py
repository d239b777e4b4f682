"""llmctl adapters (register, list, show, delete) and llmctl deployments adapters (load, unload,
list) against the live app; the deployment's node refuses every connection, so its operations
fail, which --wait turns into exit 3 (the load that succeeds: tests/control_plane/adapters)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from control_plane.adapters.schemas import AdapterOut, DeploymentAdapterOut
from control_plane.deployments.orm import DeploymentState
from control_plane.settings import Settings
from tests.control_plane.adapters.support import (
    LORA_ARGS,
    VERSION_SOURCE,
    write_adapter,
)
from tests.control_plane.deployments.support import deployment_row
from tests.control_plane.llmctl.conftest import Llmctl, api


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # The node has no Triton: a reconciler would mark the deployment UNKNOWN meanwhile.
    return settings.model_copy(update={"reconciler_enabled": False})


@pytest.fixture
def source(source_root: Path, tmp_path: Path) -> Path:
    return write_adapter(source_root / f"llmctl-{tmp_path.name}")


def test_adapters_register_list_show_delete(llmctl: Llmctl, live_url: str,
                                            admin: dict[str, str], source: Path,
                                            tmp_path: Path) -> None:
    with api(live_url, admin) as http:
        assert http.post("/models", json={"name": "chat"}).status_code == 201
        assert http.post("/models/chat/versions", json={
            "source": VERSION_SOURCE, "engine_args": LORA_ARGS}).status_code == 201

    gates = tmp_path / "gates.yaml"
    gates.write_text("smoke:\n  - prompt: Bonjour\n    expect: {contains: [Paris]}\n")
    registered = llmctl("adapters", "register", "chat", "1", "--name", "french", "--source",
                        str(source), "--gates", str(gates), "--json")
    assert registered.code == 0, registered
    adapter = AdapterOut.model_validate(registered.document())
    assert adapter.rank == 8
    assert [(g.prompt, g.expect.contains) for g in adapter.gates.smoke] == [
        ("Bonjour", ["Paris"])]
    human = llmctl("adapters", "register", "chat", "1", "--name", "german", "--source",
                   str(source), env={"CI": "true"})
    assert human.code == 0 and "registered adapter 'german' for version 1 of 'chat'" in \
        human.stdout
    taken = llmctl("adapters", "register", "chat", "1", "--name", "french", "--source",
                   str(source), "--json")
    assert taken.error_document(6)["error"] == "AdapterAlreadyExists"
    bad = llmctl("adapters", "register", "chat", "1", "--name", "x", "--source", "rel/dir",
                 "--json")
    assert bad.error_document(2)["error"] == "InvalidSource"

    listed = llmctl("adapters", "list", "chat", "1", "--json").document()
    assert [a["name"] for a in listed["items"]] == ["french", "german"]
    table = llmctl("adapters", "list", "chat", "1", env={"CI": "true"})
    assert table.stdout.splitlines()[0].split() == ["NAME", "RANK", "TARGETS", "BASE", "MODEL",
                                                    "CREATED"]
    shown = llmctl("adapters", "show", "chat", "1", "french", "--json").document()
    assert shown["target_modules"] == ["q_proj", "v_proj"]

    deleted = llmctl("adapters", "delete", "chat", "1", "german", "--json")
    assert deleted.code == 0 and deleted.document()["deleted"] is True
    assert llmctl("adapters", "show", "chat", "1", "german", "--json").error_document(2)[
        "error"] == "AdapterNotFound"


def test_deployment_adapters_load_list_unload(llmctl: Llmctl, live_url: str,
                                              admin: dict[str, str], source: Path,
                                              session_factory: sessionmaker[Session]) -> None:
    with api(live_url, admin) as http:
        assert http.post("/models", json={"name": "chat"}).status_code == 201
        assert http.post("/models/chat/versions", json={
            "source": VERSION_SOURCE, "engine_args": LORA_ARGS}).status_code == 201
        assert http.post("/models/chat/versions/1/adapters", json={
            "name": "french", "source": str(source)}).status_code == 201
        assert http.put("/models/chat/aliases/production", json={"version": 1}
                        ).status_code == 200
        assert http.post("/nodes", json={"name": "down", "http_url": "http://127.0.0.1:9",
                                         "grpc_url": "127.0.0.1:9"}).status_code == 201
    deployment_row(session_factory, "chat", "production", "down", DeploymentState.READY, 1)
    where = ("--alias", "production", "--node", "down")

    failed = llmctl("deployments", "adapters", "load", "chat", "french", *where, "--wait",
                    "--timeout", "60", "--json")
    document = failed.error_document(3)
    assert document["error"] == "OperationFailed"
    assert "did not answer the adapter load request" in document["detail"]
    (row,) = llmctl("deployments", "adapters", "list", "chat", *where, "--json").document()
    assert (DeploymentAdapterOut.model_validate(row).state, row["name"]) == ("failed", "french")
    table = llmctl("deployments", "adapters", "list", "chat", *where, env={"CI": "true"})
    assert table.stdout.splitlines()[0].split()[:3] == ["NAME", "VERSION", "STATE"]

    started = llmctl("deployments", "adapters", "load", "chat", "french", *where, "--json")
    assert started.code == 0, started
    assert started.document()["operation"]["kind"] == "adapter.load"
    waited = llmctl("operations", "wait", started.document()["operation"]["id"], "--timeout",
                    "60")
    assert waited.code == 3

    in_use = llmctl("adapters", "delete", "chat", "1", "french", "--json")
    assert in_use.error_document(6)["error"] == "AdapterInUse"
    other = llmctl("deployments", "adapters", "load", "chat", "french", *where, "--version",
                   "2", "--json")
    assert other.error_document(6)["error"] == "AdapterOfAnotherVersion"
    unloaded = llmctl("deployments", "adapters", "unload", "chat", "french", *where, "--wait",
                      "--timeout", "60", "--json")
    assert unloaded.error_document(3)["operation"]["kind"] == "adapter.unload"
    missing = llmctl("deployments", "adapters", "list", "chat", "--alias", "staging",
                     "--node", "down", "--json")
    assert missing.error_document(2)["status"] == 404
