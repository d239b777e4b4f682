"""The llm-control-plane command: migrate and bootstrap the first admin token."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import inspect
from typer.testing import CliRunner

from control_plane.cli import app as cli
from control_plane.db import make_engine
from tests.control_plane.conftest import fresh_database
from tests.control_plane.deployments.support import CONTROL_PLANE
from tests.redis_server import free_port


def test_migrate_creates_the_schema(backend: str, tmp_path: Path) -> None:
    with fresh_database(backend, tmp_path / "nested" / "dir") as url:
        result = CliRunner().invoke(cli, ["migrate"], env={"LLMCP_DATABASE_URL": url})
        assert result.exit_code == 0, result.output
        engine = make_engine(url)
        try:
            assert "models" in inspect(engine).get_table_names()
        finally:
            engine.dispose()


def test_tokens_create_prints_a_working_secret_once(
        client: TestClient, database_url: str) -> None:
    runner = CliRunner()
    env = {"LLMCP_DATABASE_URL": database_url}
    result = runner.invoke(cli, ["tokens", "create", "--name", "ops", "--scope", "admin"], env=env)
    assert result.exit_code == 0, result.output
    secret = result.stdout.strip()
    assert secret.startswith("llmcp_")
    assert "not shown again" in result.stderr

    headers = {"Authorization": f"Bearer {secret}"}
    assert client.get("/api/v1/audit", headers=headers).status_code == 200
    events = client.get("/api/v1/audit", headers=headers, params={"actor": "cli"}).json()["items"]
    assert [(e["action"], e["target"]) for e in events] == [("token.create", "ops")]

    again = runner.invoke(cli, ["tokens", "create", "--name", "ops", "--scope", "read"], env=env)
    assert again.exit_code == 1
    assert "already exists" in again.stderr


@pytest.mark.parametrize("scope", ["root", ""])
def test_unknown_scope_is_refused(scope: str) -> None:
    result = CliRunner().invoke(cli, ["tokens", "create", "--name", "x", "--scope", scope])
    assert result.exit_code == 2


def test_tokens_create_from_a_secret_file_is_repeatable(
        client: TestClient, database_url: str, tmp_path: Path) -> None:
    """A deployment's migration job bootstraps the tokens its processes read from mounted
    secrets: the secret is the file's, and a second run changes nothing."""
    runner = CliRunner()
    env = {"LLMCP_DATABASE_URL": database_url}
    secret_file = tmp_path / "node-token"
    secret_file.write_text("n0de-" + "x" * 40 + "\n")
    command = ["tokens", "create", "--name", "nodes", "--scope", "node",
               "--secret-file", str(secret_file)]
    first = runner.invoke(cli, command, env=env)
    assert first.exit_code == 0, first.output
    assert "created" in first.stdout and "x" * 40 not in first.output
    again = runner.invoke(cli, command, env=env)
    assert again.exit_code == 0 and "already accepts" in again.stdout

    headers = {"Authorization": f"Bearer {'n0de-' + 'x' * 40}"}
    assert client.get("/api/v1/nodes", headers=headers).status_code == 200
    assert client.post("/api/v1/models", headers=headers, json={"name": "m"}).status_code == 403

    # Another secret under that name, a short secret, a missing file: refused, nothing changed.
    secret_file.write_text("y" * 40)
    other = runner.invoke(cli, command, env=env)
    assert other.exit_code == 1 and "revoke it first" in other.stderr
    (tmp_path / "short").write_text("tiny")
    short = runner.invoke(cli, [*command[:-1], str(tmp_path / "short")], env=env)
    assert short.exit_code == 1 and "at least 32 characters" in short.stderr
    missing = runner.invoke(cli, [*command[:-1], str(tmp_path / "absent")], env=env)
    assert missing.exit_code == 1 and "cannot read the secret file" in missing.stderr
    assert client.get("/api/v1/nodes", headers=headers).status_code == 200


def test_serve_with_several_workers_on_sqlite_warns(tmp_path: Path) -> None:
    """Several workers on SQLite race for its one write lock: the operator is told at start."""
    env = {**os.environ, "LLMCP_DATABASE_URL": f"sqlite:///{tmp_path / 'cp.db'}",
           "LLMCP_PORT": str(free_port())}
    command = [str(CONTROL_PLANE), "serve", "--workers", "2"]
    with subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as server:
        try:
            assert server.stderr is not None
            # The warning comes before uvicorn starts; the first line is enough.
            first = server.stderr.readline()
        finally:
            os.killpg(server.pid, signal.SIGKILL)
    assert first.startswith("warning: 2 workers on SQLite race for its one write lock"), first
    assert "--workers 1" in first
