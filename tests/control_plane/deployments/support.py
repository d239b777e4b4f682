"""Helpers shared by the deployment tests that drive real tritonserver nodes through the API."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction
from control_plane.deployments.naming import triton_model_name
from control_plane.deployments.orm import Deployment, DeploymentState
from control_plane.nodes.orm import TritonNode
from control_plane.registry.orm import Model
from control_plane.triton.llm_client import GrpcStream
from control_plane.triton.runtime import CACHE_DIR
from control_plane.triton.server import TritonServer, free_port

T = TypeVar("T")
# The in-process app (TestClient) or a control plane running as its own process (httpx).
Http = TestClient | httpx.Client

MODEL_SOURCE = CACHE_DIR / "models" / "SmolLM2-135M-Instruct"
ENGINE_ARGS = {"max_model_len": 512, "max_num_seqs": 3, "enforce_eager": True}
LOAD_TIMEOUT = 300
CONTROL_PLANE = Path(sys.executable).parent / "llm-control-plane"


def repository_key_in(variable: str) -> Iterator[str]:
    """A fresh repository-API key, in environment variable ``variable`` while the caller runs
    (the control plane reads it from there through a node's ``api_key_ref``)."""
    key = secrets.token_urlsafe(24)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(variable, key)
        yield key


def running_nodes(tmp_path_factory: pytest.TempPathFactory, names: Sequence[str], key: str,
                  log_prefix: str, own_cores: bool = False) -> Iterator[dict[str, TritonServer]]:
    """tritonserver nodes with empty repositories locked to ``key``, stopped afterwards.

    ``own_cores``: each node's engines pinned to a core of their own, as on machines of their
    own. Otherwise every engine here binds core 0, and one engine busy there starves another's
    start (its worker got 1 % of the core for minutes)."""
    cores = os.cpu_count() or 1
    nodes = {name: TritonServer(
        tmp_path_factory.mktemp(f"{name}-repository"), repository_key=key,
        log_path=CACHE_DIR / "logs" / f"{log_prefix}-{name}.log",
        environment={"VLLM_CPU_OMP_THREADS_BIND": str(index % cores)} if own_cores else None)
        for index, name in enumerate(names)}
    try:
        for node in nodes.values():
            node.start()
        yield nodes
    finally:
        for node in nodes.values():
            node.stop()


def wait_until(probe: Callable[[], T | None], what: str, timeout: float = LOAD_TIMEOUT,
               interval: float = 0.25) -> T:
    """Poll ``probe`` until it returns something other than None (or False) and return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g} s")
        time.sleep(interval)


def finished(client: Http, headers: dict[str, str], started: Any,
             timeout: float = LOAD_TIMEOUT) -> dict[str, Any]:
    """The operation a 202 started, once it has succeeded or failed."""
    assert started.status_code == 202, started.text
    location = started.headers["Location"]

    def outcome() -> dict[str, Any] | None:
        operation: dict[str, Any] = client.get(location, headers=headers).json()
        return operation if operation["status"] in ("succeeded", "failed") else None

    return wait_until(outcome, f"the end of {location}", timeout)


def generate(node: TritonServer, model: str = "m") -> str:
    stream = GrpcStream(node.grpc_url, model)
    try:
        stream.submit("The capital of France is", {"max_tokens": 8, "temperature": 0})
        result = stream.wait(120)
    finally:
        stream.close()
    assert result.error is None and result.final, result
    return result.text


def register(client: Http, headers: dict[str, str], engine_args: dict[str, Any],
             model: str = "m", triton_config: dict[str, Any] | None = None) -> int:
    created = client.post(f"/api/v1/models/{model}/versions", headers=headers, json={
        "source": str(MODEL_SOURCE), "engine_args": engine_args,
        "triton_config": triton_config or {}})
    assert created.status_code == 201, created.text
    number: int = created.json()["number"]
    return number


class ControlPlane:
    """``llm-control-plane`` run as separate processes on one database (a SQLite file unless
    given), as an operator would."""

    def __init__(self, directory: Path, database_url: str | None = None,
                 log_name: str = "test-faults-control-plane") -> None:
        self.directory = directory
        self.port = free_port()
        self.database_url = database_url or f"sqlite:///{directory / 'control-plane.db'}"
        self.log_path = CACHE_DIR / "logs" / f"{log_name}.log"
        self.env = {
            **os.environ,
            "LLMCP_DATABASE_URL": self.database_url,
            "LLMCP_PORT": str(self.port),
            "LLMCP_SOURCE_ROOTS": f'["{(CACHE_DIR / "models").resolve()}"]',
            "LLMCP_RECONCILE_INTERVAL_SECONDS": "1",
        }
        self.process: subprocess.Popen[bytes] | None = None
        self.cli("migrate")
        secret = self.cli("tokens", "create", "--name", f"t-{secrets.token_hex(3)}", "--scope",
                          "admin").strip()
        self.headers = {"Authorization": f"Bearer {secret.splitlines()[-1]}"}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cli(self, *arguments: str) -> str:
        done = subprocess.run([str(CONTROL_PLANE), *arguments], check=False, env=self.env,
                              cwd=self.directory, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def start(self, workers: int = 1) -> httpx.Client:
        """A new ``serve`` process (with ``workers`` API workers); returns a client for it once
        it answers."""
        assert self.process is None or self.process.poll() is not None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen([str(CONTROL_PLANE), "serve",
                                             "--workers", str(workers)], env=self.env,
                                            cwd=self.directory, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        http = httpx.Client(base_url=self.url, headers=self.headers, timeout=30)

        def answers() -> bool:
            assert self.process is not None and self.process.poll() is None, \
                f"llm-control-plane serve exited; see {self.log_path}"
            try:
                return http.get("/readyz").status_code == 200
            except httpx.TransportError:
                return False

        # Generous: several workers importing the app at once on a loaded 2-core machine.
        wait_until(answers, "llm-control-plane serve answering", 180, 0.1)
        return http

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
        # Workers of a server that was killed outlive it: end its whole session.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


def deployment_row(factory: sessionmaker[Session], model: str, alias: str, node: str,
                   state: DeploymentState, serving_version: int | None,
                   wanted: bool = True) -> int:
    """A deployment as the actuator leaves it (the API would start loading it on Triton)."""
    with transaction(factory) as session:
        model_id = session.scalar(select(Model.id).where(Model.name == model))
        node_id = session.scalar(select(TritonNode.id).where(TritonNode.name == node))
        deployment = Deployment(model_id=model_id, alias=alias, node_id=node_id,
                                triton_name=triton_model_name(model, alias), wanted=wanted,
                                state=state.value, serving_version=serving_version,
                                updated_by="test")
        session.add(deployment)
        session.flush()
        return deployment.id
