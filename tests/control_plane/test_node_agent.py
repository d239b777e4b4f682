"""``llm-node``, the node agent, as a node container runs it: a real tritonserver with its
repository API locked by the key, joined to a real control plane over HTTP, and out again on
SIGTERM; bad settings and a refused token stop it with a clear message."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from control_plane.auth.scopes import Scope
from control_plane.triton import restricted_api
from control_plane.triton.server import free_port
from tests.control_plane.conftest import issue_token

KEY = "node-agent-test-repository-key-0123456789"


def _environment(tmp_path: Path, control_plane: str, token: str) -> dict[str, str]:
    (tmp_path / "token").write_text(token + "\n")
    key_file = tmp_path / "repository-key"
    key_file.write_text(KEY)
    return {**os.environ, "LLM_NODE_NAME": "triton-0", "LLM_NODE_ADVERTISE_HOST": "127.0.0.1",
            "LLM_NODE_CONTROL_PLANE_URL": control_plane,
            "LLM_NODE_TOKEN_FILE": str(tmp_path / "token"),
            "LLM_NODE_REPOSITORY_KEY_FILE": str(key_file),
            "LLM_NODE_API_KEY_REF": f"file:{key_file}",
            "LLM_NODE_LABELS": '{"pool": "cpu"}',
            "LLM_NODE_HTTP_PORT": str(free_port()), "LLM_NODE_GRPC_PORT": str(free_port()),
            "LLM_NODE_METRICS_PORT": str(free_port()),
            "LLM_NODE_MODEL_REPOSITORY": str(tmp_path / "repository"),
            "LLM_NODE_DRAIN_SECONDS": "1"}


def _agent(environment: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as output:
        return subprocess.Popen([sys.executable, "-m", "node_agent.main"], env=environment,
                                stdout=output, stderr=subprocess.STDOUT)


@pytest.fixture
def node_token(session_factory: sessionmaker[Session]) -> str:
    return issue_token(session_factory, "nodes", Scope.NODE)["Authorization"].split()[1]


@pytest.fixture
def agents() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


def _wait_for_node(api: httpx.Client, present: bool, timeout: float = 90.0
                   ) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = api.get("/api/v1/nodes/triton-0")
        if (response.status_code == 200) == present:
            body: dict[str, Any] | None = response.json() if present else None
            return body
        time.sleep(0.25)
    raise AssertionError(f"node triton-0 {'never joined' if present else 'never left'}")


def test_joins_serves_locked_and_leaves_on_sigterm(
        live_url: str, node_token: str, admin: dict[str, str], tmp_path: Path,
        agents: list[subprocess.Popen[bytes]]) -> None:
    environment = _environment(tmp_path, live_url, node_token)
    log = tmp_path / "agent.log"
    agent = _agent(environment, log)
    agents.append(agent)
    http_port = environment["LLM_NODE_HTTP_PORT"]
    with httpx.Client(base_url=live_url, headers=admin, timeout=10) as api:
        node = _wait_for_node(api, present=True)
        assert node is not None, log.read_text()
        assert node["http_url"] == f"http://127.0.0.1:{http_port}/"
        assert node["grpc_url"] == f"127.0.0.1:{environment['LLM_NODE_GRPC_PORT']}"
        assert node["labels"] == {"pool": "cpu"}
        assert node["api_key_ref"] == environment["LLM_NODE_API_KEY_REF"]

        # Its repository API opens with the key only; health is open.
        triton = f"http://127.0.0.1:{http_port}"
        assert httpx.get(f"{triton}/v2/health/ready").status_code == 200
        assert httpx.post(f"{triton}/v2/repository/index").status_code == 403
        assert httpx.post(f"{triton}/v2/repository/index", json={},
                          headers=restricted_api.http_headers(KEY)).status_code == 200

        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=120) == 0, log.read_text()
        _wait_for_node(api, present=False, timeout=5)
        actions = [event["action"] for event in api.get(
            "/api/v1/audit", params={"target_type": "node"}).json()["items"]]
        assert actions == ["node.leave", "node.register"]
        assert "left the control plane" in log.read_text()
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{triton}/v2/health/live")

        # Started again (a restarted pod): the same node joins again.
        again = _agent(environment, tmp_path / "again.log")
        agents.append(again)
        assert _wait_for_node(api, present=True) is not None
        again.send_signal(signal.SIGTERM)
        assert again.wait(timeout=120) == 0


def test_bad_settings_and_a_refused_token_stop_it_clearly(
        live_url: str, tmp_path: Path, agents: list[subprocess.Popen[bytes]],
        session_factory: sessionmaker[Session]) -> None:
    environment = _environment(tmp_path, live_url, "not-a-token")
    missing = {**environment, "LLM_NODE_TOKEN_FILE": str(tmp_path / "absent")}
    result = subprocess.run([sys.executable, "-m", "node_agent.main"], check=False, env=missing,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "cannot read LLM_NODE_TOKEN_FILE" in result.stderr

    bad_name = {**environment, "LLM_NODE_NAME": "Triton 0"}
    result = subprocess.run([sys.executable, "-m", "node_agent.main"], check=False, env=bad_name,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "name" in result.stderr

    # A token the control plane does not know: no retrying forever, exit 3 and why.
    log = tmp_path / "refused.log"
    agent = _agent(environment, log)
    agents.append(agent)
    assert agent.wait(timeout=120) == 3, log.read_text()
    assert "refused this node's join (401)" in log.read_text()
