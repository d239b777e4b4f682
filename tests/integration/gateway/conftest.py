"""One stack for every gateway test: a control plane process, two tritonserver nodes serving model
``m`` (production) with the real backend, tenants with keys, and an ``llm-gateway`` process in
front. Built once per test session (each node load costs ~30-100 s here)."""

from __future__ import annotations

import secrets
import subprocess
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Self

import httpx
import pytest

from control_plane.serve import GatewayPorts, GatewayProcess
from control_plane.triton.runtime import CACHE_DIR
from control_plane.triton.server import TritonServer, free_port
from llm_backend.gateway_trust import GATEWAY_SECRET_ENV
from tests.control_plane.deployments.support import (
    ENGINE_ARGS,
    ControlPlane,
    finished,
    register,
    running_nodes,
    wait_until,
)

KEY_VARIABLE = "LLMCP_TEST_GATEWAY_TRITON_KEY"
NODE_NAMES = ("gw-a", "gw-b")
MODEL = "m"
# The slow-client test waits this long for a body; short so the test is too.
BODY_TIMEOUT_S = 3
TENANTS = {
    "acme": {"allowed_models": ["*"]},
    "limited": {"allowed_models": [MODEL], "max_priority_level": 2},
    "lowered": {"allowed_models": [MODEL], "max_priority_level": 2,
                "priority_over_limit": "lower"},
    "elsewhere": {"allowed_models": ["other"]},
    "off": {"allowed_models": ["*"], "enabled": False},
}


@dataclass
class Stack:
    control_plane: ControlPlane
    admin: httpx.Client
    nodes: dict[str, TritonServer]
    gateway: GatewayProcess
    keys: dict[str, str]
    version: int
    secret: str
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def http(self) -> str:
        return f"http://{self.gateway.http_address}"

    @property
    def grpc(self) -> str:
        return self.gateway.grpc_address

    def bearer(self, tenant: str = "acme") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}

    def client(self, tenant: str = "acme", timeout: float = 120) -> httpx.Client:
        return httpx.Client(base_url=self.http, headers=self.bearer(tenant), timeout=timeout)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    secret = secrets.token_urlsafe(24)
    with pytest.MonkeyPatch.context() as patch:
        # The nodes' environment (and a restarted node's): the backend trusts the tenant
        # parameter only with this secret.
        patch.setenv(GATEWAY_SECRET_ENV, secret)
        key = secrets.token_urlsafe(24)
        patch.setenv(KEY_VARIABLE, key)
        nodes_iter = running_nodes(tmp_path_factory, NODE_NAMES, key, "test-gateway",
                                   own_cores=True)
        nodes = next(nodes_iter)
        control_plane = ControlPlane(tmp_path_factory.mktemp("gateway-cp"),
                                     log_name="test-gateway-control-plane")
        # The stats test reads a window of a few seconds; the autoscaling test decides each second.
        control_plane.env["LLMCP_STATS_POLL_INTERVAL_SECONDS"] = "1"
        control_plane.env["LLMCP_AUTOSCALE_INTERVAL_SECONDS"] = "1"
        gateway = None
        try:
            admin = control_plane.start()
            for name, node in nodes.items():
                created = admin.post("/api/v1/nodes", json={
                    "name": name, "http_url": f"http://{node.http_url}",
                    "grpc_url": node.grpc_url, "metrics_url": node.metrics_url,
                    "api_key_ref": f"env:{KEY_VARIABLE}"})
                assert created.status_code == 201, created.text
            assert admin.post("/api/v1/models", json={"name": MODEL}).status_code == 201
            version = register(admin, {}, ENGINE_ARGS, model=MODEL)
            moved = admin.put(f"/api/v1/models/{MODEL}/aliases/production",
                              json={"version": version})
            assert moved.status_code in (200, 201), moved.text
            started = [admin.put(f"/api/v1/models/{MODEL}/aliases/production/deployments/{n}")
                       for n in nodes]
            for operation in [finished(admin, {}, response) for response in started]:
                assert operation["status"] == "succeeded", operation
            keys = {}
            for name, body in TENANTS.items():
                created = admin.post("/api/v1/tenants", json={"name": name, **body})
                assert created.status_code == 201, created.text
                issued = admin.post(f"/api/v1/tenants/{name}/keys", json={"name": "k1"})
                assert issued.status_code == 201, issued.text
                keys[name] = issued.json()["key"]
            # report: it reads the routing table and reports usage.
            token = control_plane.cli("tokens", "create", "--name", "gateway", "--scope",
                                      "report").strip().splitlines()[-1]
            gateway = GatewayProcess(
                GatewayPorts("127.0.0.1", free_port(), free_port()), control_plane.url, token,
                secret, log_path=CACHE_DIR / "logs" / "test-gateway.log",
                settings={"LLMGW_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT_S),
                          "LLMGW_NODE_POLL_INTERVAL_SECONDS": "0.5",
                          "LLMGW_ROUTING_WAIT_SECONDS": "5"})
            gateway.start()
            gateway.wait_serving(MODEL, keys["acme"])
            yield Stack(control_plane, admin, nodes, gateway, keys, version, secret)
        finally:
            if gateway is not None:
                gateway.stop()
            control_plane.stop()
            for _ in nodes_iter:
                pass


class Load:
    """``clients`` sending requests one after another through the gateway until stopped; counts
    what was answered and keeps every failure."""

    def __init__(self, stack: Stack, clients: int = 1, max_tokens: int = 4,
                 prompt: str = "The capital of France is", pause_s: float = 0.0) -> None:
        self.stack = stack
        self.body = {"text_input": prompt, "parameters": {"max_tokens": max_tokens}}
        self.pause_s = pause_s
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run) for _ in range(clients)]

    def __enter__(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            answer = httpx.post(f"{self.stack.http}/v2/models/{MODEL}/generate",
                                headers=self.stack.bearer(), json=self.body, timeout=600)
            if answer.status_code == 200:
                self.ok += 1
            else:
                self.failures.append(f"{answer.status_code} {answer.text[:300]}")
            self._stop.wait(self.pause_s)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=600)


def healthz(stack: Stack) -> dict[str, object]:
    return httpx.get(f"{stack.http}/healthz", timeout=10).json()


def node_serves(stack: Stack, name: str) -> bool:
    """The gateway routes to ``name`` (in its table and not ejected)."""
    models = healthz(stack)["models"]
    endpoints = models.get(MODEL, []) if isinstance(models, dict) else []
    return any(e["node"] == name and not e["ejected"] for e in endpoints)


def production_engines(stack: Stack) -> dict[str, str]:
    """Node -> state of the production deployments that are wanted."""
    found = stack.admin.get("/api/v1/deployments", params={"model": MODEL}).json()["items"]
    return {d["node"]: d["state"] for d in found if d["alias"] == "production" and d["wanted"]}


def kernel_oom_kills() -> list[str]:
    """The kernel's last out-of-memory kills, where its log is readable (empty otherwise)."""
    try:
        kernel = subprocess.run(["dmesg"], check=False, capture_output=True, text=True,
                                timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line for line in kernel.splitlines()
            if "Out of memory" in line or "Killed process" in line][-5:]


def nodes_report(stack: Stack, names: Iterable[str], lines: int = 40) -> str:
    """What a failure message needs about nodes: each one's process and the end of its log (long
    lines cut: vLLM logs its whole configuration on one line), then any out-of-memory kill."""
    parts = []
    for name in names:
        node = stack.nodes[name]
        process = node.process
        status = ("not started" if process is None else "running" if process.poll() is None
                  else f"exited with {process.returncode}")
        tail = (node.log_path.read_text(errors="replace").splitlines()[-lines:]
                if node.log_path.exists() else [])
        heading = f"node {name}: tritonserver {status}; the end of {node.log_path}:"
        parts.append("\n".join([heading, *(line[:300] for line in tail)]))
    oom = kernel_oom_kills()
    return "\n\n".join([*parts, *(["the kernel's out-of-memory kills:\n" + "\n".join(oom)]
                                  if oom else [])])


# A restarted node's reload (~30-100 s here) and the gateway's probe, with room for a slow host.
HEAL_TIMEOUT_S = 600


def serve_production_everywhere(stack: Stack) -> bool:
    """Put production back on every node that lost it, and wait until the gateway routes to
    each."""
    if all(node_serves(stack, name) for name in stack.nodes):
        return True
    for name in set(stack.nodes) - set(production_engines(stack)):
        stack.admin.put(f"/api/v1/models/{MODEL}/aliases/production/deployments/{name}")
    try:
        wait_until(lambda: all(node_serves(stack, name) for name in stack.nodes),
                   "the gateway routing to every node", HEAL_TIMEOUT_S, interval=1)
    except AssertionError:
        return False
    return True


@pytest.fixture(autouse=True)
def nodes_outlive_each_test(stack: Stack) -> Iterator[None]:
    """A node that died during a test fails that test, saying why, and is started again (the
    reconciler reloads it) before the next: once a node died in the autoscaling test on CI and
    the thirteen tests after it failed for want of it, with nothing saying why it had died."""
    yield
    died = [name for name, node in stack.nodes.items()
            if node.process is None or node.process.poll() is not None]
    # Read before the restart, which writes on in the same log.
    report = nodes_report(stack, died) if died else ""
    for name in died:
        stack.nodes[name].start()
    served = serve_production_everywhere(stack)
    if died:
        pytest.fail(f"a node died during this test:\n{report}" + (
            "" if served else f"\n(and it was not serving again after {HEAL_TIMEOUT_S} s)"),
                    pytrace=False)
    if not served:
        pytest.fail("the stack was not serving on every node after this test:\n"
                    + nodes_report(stack, stack.nodes), pytrace=False)


__all__ = ["MODEL", "Load", "Stack", "healthz", "node_serves", "nodes_report",
           "production_engines", "serve_production_everywhere", "wait_until"]
