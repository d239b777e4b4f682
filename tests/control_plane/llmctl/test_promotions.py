"""llmctl promote without a Triton node to reach: what is refused locally (exit 2, before any
request), what the server refuses, a promotion that fails (3), one still running when the wait
times out (4, with its id) and a second one while it runs (6, naming it). Promotions through
real Triton nodes are tested with the promotions themselves."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import database_url, transaction
from control_plane.promotions.driver import driver_lock
from control_plane.promotions.orm import Promotion, PromotionState
from control_plane.promotions.schemas import STEPS, PromotionOut
from control_plane.registry.orm import Model
from tests.control_plane.llmctl.conftest import (
    Llmctl,
    api,
    in_a_terminal,
    secret_of,
    write_manifest,
)

NOWHERE = {"LLMCP_URL": "http://127.0.0.1:9", "LLMCP_TOKEN": "llmcp_unused"}


@pytest.mark.parametrize("args, message", [
    ([], "give exactly one of --version N"),
    (["--version", "1", "--manifest", "m.yaml"], "give exactly one of --version N"),
    (["--version", "1", "--timeout", "5"], "--timeout only applies with --wait"),
    (["--version", "1", "--adapter", "french"], "give exactly one of --version N"),
    (["--version", "1", "--adapter-source", "/a"], "--adapter-source and --gates go with"),
    (["--adapter", "french", "--gates", "g.yaml"], "--gates goes with --adapter-source"),
], ids=["neither", "both", "timeout-without-wait", "version-and-adapter",
        "source-without-adapter", "gates-without-source"])
def test_refused_locally_with_exit_2(run_llmctl: Llmctl, args: list[str], message: str
                                     ) -> None:
    result = run_llmctl("promote", "chat", "--to", "production", *args, "--json", env=NOWHERE)
    assert message in result.error_document(2)["detail"]


def test_a_bad_manifest_is_refused_before_any_request(run_llmctl: Llmctl, tmp_path: Path
                                                      ) -> None:
    manifest = write_manifest(tmp_path, "m.yaml", {"source": "hf://org/m",
                                                   "gates": {"smoke": [{"prompt": ""}]}})
    result = run_llmctl("promote", "chat", "--manifest", str(manifest), "--to", "production",
                        "--json", env=NOWHERE)
    assert result.error_document(2)["problems"][0].startswith("gates.smoke[0].prompt:")


def test_a_bad_gates_file_is_refused_before_any_request(run_llmctl: Llmctl, tmp_path: Path
                                                        ) -> None:
    gates = write_manifest(tmp_path, "g.yaml", {"smoke": [{"prompt": "hi", "max_tokens": 0}]})
    result = run_llmctl("promote", "chat", "--to", "production", "--adapter", "french",
                        "--adapter-source", "/srv/french", "--gates", str(gates), "--json",
                        env=NOWHERE)
    assert result.error_document(2)["problems"][0].startswith("smoke[0].max_tokens:")


def _model_with_a_version(live_url: str, admin: dict[str, str]) -> None:
    with api(live_url, admin) as http:
        assert http.post("/models", json={"name": "chat"}).status_code == 201
        assert http.post("/models/chat/versions", json={"source": "hf://org/chat"}
                         ).status_code == 201


def test_server_refusals_exit_2(llmctl: Llmctl, live_url: str, admin: dict[str, str]) -> None:
    _model_with_a_version(live_url, admin)
    unknown = llmctl("promote", "chat", "--version", "7", "--to", "production", "--node", "n1",
                     "--json")
    assert unknown.error_document(2)["error"] == "VersionNotFound"
    nowhere = llmctl("promote", "chat", "--version", "1", "--to", "production", "--json")
    assert "--node" in nowhere.error_document(2)["detail"]
    no_node = llmctl("promote", "chat", "--version", "1", "--to", "production", "--node",
                     "ghost", "--json")
    assert no_node.error_document(2)["error"] == "NodeNotFound"


def _register_node(live_url: str, admin: dict[str, str], name: str, port: int) -> None:
    with api(live_url, admin) as http:
        response = http.post("/nodes", json={"name": name, "http_url": f"http://127.0.0.1:{port}",
                                             "grpc_url": f"127.0.0.1:{port}"})
        assert response.status_code == 201, response.text


@contextmanager
def _running_promotion(session_factory: sessionmaker[Session]) -> Iterator[str]:
    """A promotion of 'chat' that stays running while the test looks at it: recorded as one,
    and driven by "another process" — the test holds its driver lock, so the server's adopter,
    which resumes unfinished promotions nobody drives every 10 s, leaves it alone (on a loaded
    CI machine the test outlasted that once, and the adopted run failed it: n1 is no node)."""
    with transaction(session_factory) as session:
        model = session.scalars(select(Model).where(Model.name == "chat")).one()
        promotion = Promotion(id=uuid.uuid4().hex, model_id=model.id, alias="production",
                              version=1, state=PromotionState.RUNNING.value,
                              steps=[{"name": name, "state": "pending"} for name in STEPS],
                              gate_results=[], nodes=["n1"], progress={},
                              requested_by="test-setup")
        session.add(promotion)
        promotion_id = promotion.id
    with driver_lock(database_url(session_factory), promotion_id) as driver:
        assert driver.try_acquire()
        yield promotion_id


def test_wait_times_out_with_the_id_and_a_second_promotion_conflicts(
        llmctl: Llmctl, live_url: str, admin: dict[str, str],
        session_factory: sessionmaker[Session]) -> None:
    _model_with_a_version(live_url, admin)
    with _running_promotion(session_factory) as running:
        waited = llmctl("promotions", "wait", running, "--timeout", "1.5", "--json")
        document = waited.error_document(4)
        assert document["promotion_id"] == running
        assert PromotionOut.model_validate(document["promotion"]).state == "running"
        assert f"llmctl promotions wait {running}" in document["detail"]
        in_ci = llmctl("promotions", "wait", running, "--timeout", "1", env={"CI": "true"})
        assert in_ci.code == 4 and running in in_ci.stderr
        assert f"promotion {running} of 'chat' to 'production': running" in in_ci.stderr

        second = llmctl("promote", "chat", "--version", "1", "--to", "production", "--node", "n1",
                        "--wait", "--json")
        assert second.error_document(6)["promotion_id"] == running
        human = llmctl("promote", "chat", "--version", "1", "--to", "production", "--node", "n1")
        assert human.code == 6 and f"promotion {running} of 'chat' is still running" in human.stderr

        listed = llmctl("promotions", "list", "chat", "--state", "running", "--json").document()
        assert [p["id"] for p in listed["items"]] == [running]
        shown = llmctl("promotions", "show", running)
        assert shown.code == 0 and "STEP" in shown.stdout and "deploy_candidate" in shown.stdout


def test_waiting_on_a_terminal_shows_a_live_display(
        live_url: str, admin: dict[str, str], session_factory: sessionmaker[Session],
        tmp_path: Path) -> None:
    _model_with_a_version(live_url, admin)
    with _running_promotion(session_factory) as running:
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TERM": "xterm-256color",
               "LLMCP_URL": live_url, "LLMCP_TOKEN": secret_of(admin)}
        code, written = in_a_terminal(["promotions", "wait", running, "--timeout", "2"], env)
        assert code == 4, written
        # The display redraws in place (cursor movements) and lists the steps as they stand.
        assert "\x1b[" in written and "deploy_candidate" in written and "pending" in written
        assert f"promotion {running} of 'chat' to 'production': running" in written
        assert f"llmctl promotions wait {running}" in written


def test_a_failed_promotion_exits_3_and_says_where(llmctl: Llmctl, live_url: str,
                                                   admin: dict[str, str]) -> None:
    _model_with_a_version(live_url, admin)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    _register_node(live_url, admin, "down", closed_port)
    failed = llmctl("promote", "chat", "--version", "1", "--to", "production", "--node", "down",
                    "--wait", "--timeout", "120", "--json")
    document = failed.error_document(3)
    promotion = PromotionOut.model_validate(document["promotion"])
    assert promotion.state == "failed" and promotion.failed_step is not None
    assert f"failed at step {promotion.failed_step}" in document["detail"]
    assert "was not moved" in document["detail"]

    human = llmctl("promotions", "wait", promotion.id, env={"CI": "true"})
    assert human.code == 3
    assert f"promotion {promotion.id} failed" in human.stdout
    assert f"failed at step {promotion.failed_step}" in human.stderr
