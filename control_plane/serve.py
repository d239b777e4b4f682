"""The main job: the inference gateway on the public ports, the control plane's admin REST API,
and tritonserver on internal loopback ports in explicit model-control mode, its repository API
locked to a key only the control plane holds. The demo LLM is registered, pointed at by
``production`` and deployed on that node through the control plane, then served through our
backend; clients reach it only through the gateway, with the demo tenant's API key.

tritonserver and the gateway are supervised: either one that exits is started again with
backoff, and the reconciler loads what should run on a node that came back empty.

Run through ``make serve`` (which installs what is missing first). Stops cleanly on Ctrl-C/SIGTERM:
the gateway and the admin API stop taking requests, Triton unloads the model, the backend drains
in-flight streams, the engine exits.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from control_plane import demo_access, demo_deployment, migrate
from control_plane.app import create_app
from control_plane.db import ensure_sqlite_directory, transaction
from control_plane.registry.serving import ServingSettings
from control_plane.settings import Settings
from control_plane.triton.model_config import read_model_json
from control_plane.triton.runtime import CACHE_DIR, PROJECT_ROOT
from control_plane.triton.server import TritonPorts, TritonServer

DEFAULT_MODEL = "smollm2"
# The local node's repository-API key reaches the control plane (same process) through here.
KEY_VARIABLE = "LLMCP_LOCAL_TRITON_KEY"
# Shared by the node's backend and the gateway: the backend trusts the tenant parameter only
# with it (llm_backend/gateway_trust.py).
GATEWAY_SECRET_VARIABLE = "LLM_GATEWAY_SECRET"
DEMO_KEY_FILE = CACHE_DIR / "demo-api-key"
RESTART_MIN_S = 1.0
RESTART_MAX_S = 30.0
# A child that ran this long before it exited starts again without waiting.
HEALTHY_RUN_S = 60.0


def usage(gateway: GatewayProcess, server: TritonServer, model: str, key: str) -> str:
    http, grpc = gateway.http_address, gateway.grpc_address
    return f"""
Model '{model}' is ready behind the gateway (HTTP http://{http}, gRPC {grpc}).
The Triton node listens on loopback only (http://{server.http_url}); clients never call it.

The demo tenant's API key (kept in {DEMO_KEY_FILE}):
  export LLM_API_KEY={key}

Generate (one response):
  curl -s -X POST http://{http}/v2/models/{model}/generate -H "Authorization: Bearer $LLM_API_KEY" \\
    -d '{{"text_input": "The capital of France is", "parameters": {{"max_tokens": 16, "temperature": 0}}}}'

Stream tokens (server-sent events), at priority level 1 (most urgent; default is 3):
  curl -s -N -X POST http://{http}/v2/models/{model}/generate_stream -H "Authorization: Bearer $LLM_API_KEY" \\
    -d '{{"text_input": "Write a haiku about GPUs", "stream": true, "parameters": {{"max_tokens": 48, "priority": 1}}}}'

gRPC streaming (Python, tritonclient; the key from $LLM_API_KEY):
  .venv/bin/python -m control_plane.grpc_example --url {grpc} --model {model} --priority 1 "Write a haiku about GPUs"

OpenAI-compatible (any OpenAI client; base URL http://{http}/v1):
  curl -s http://{http}/v1/chat/completions -H "Authorization: Bearer $LLM_API_KEY" -H "Content-Type: application/json" \\
    -d '{{"model": "{model}", "messages": [{{"role": "user", "content": "What is the capital of France?"}}], "max_tokens": 32}}'

Ctrl-C stops everything (in-flight streams are drained first).
"""


@dataclass
class GatewayPorts:
    host: str
    http: int
    grpc: int


LOCAL_REDIS = ("127.0.0.1", 6379)


def local_redis() -> str | None:
    """redis://127.0.0.1:6379/0 when a Redis answers there (the demo counts tenant limits in
    it, as a production gateway would); None otherwise."""
    try:
        with socket.create_connection(LOCAL_REDIS, timeout=0.3) as sock:
            sock.sendall(b"PING\r\n")
            if sock.recv(16).startswith(b"+PONG"):
                return f"redis://{LOCAL_REDIS[0]}:{LOCAL_REDIS[1]}/0"
    except OSError:
        pass
    return None


class GatewayProcess:
    """``llm-gateway`` as a child process, reading its routing table from this control plane."""

    def __init__(self, ports: GatewayPorts, control_plane_url: str, token: str,
                 gateway_secret: str, log_path: Path | None = None,
                 settings: dict[str, str] | None = None) -> None:
        self.ports = ports
        self.log_path = log_path or CACHE_DIR / "logs" / "gateway.log"
        self.env = {**os.environ, "LLMGW_HOST": ports.host, "LLMGW_HTTP_PORT": str(ports.http),
                    "LLMGW_GRPC_PORT": str(ports.grpc),
                    "LLMGW_CONTROL_PLANE_URL": control_plane_url,
                    "LLMGW_CONTROL_PLANE_TOKEN": token, "LLMGW_GATEWAY_SECRET": gateway_secret,
                    **(settings or {})}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def http_address(self) -> str:
        host = "127.0.0.1" if self.ports.host in ("0.0.0.0", "") else self.ports.host
        return f"{host}:{self.ports.http}"

    @property
    def grpc_address(self) -> str:
        return self.http_address.rsplit(":", 1)[0] + f":{self.ports.grpc}"

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "gateway.main"], env=self.env,
                                            stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def serves(self, model: str, key: str) -> bool:
        request = urllib.request.Request(f"http://{self.http_address}/v2/models/{model}/ready",
                                         headers={"Authorization": f"Bearer {key}"})
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                status: int = response.status
                return status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_serving(self, model: str, key: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self.serves(model, key):
            if self.process is None or self.process.poll() is not None:
                raise SystemExit(f"the gateway exited; see {self.log_path} (are ports "
                                 f"{self.ports.http}/{self.ports.grpc} taken? set "
                                 "LLMGW_HTTP_PORT / LLMGW_GRPC_PORT)")
            if time.monotonic() > deadline:
                raise SystemExit(f"the gateway does not serve '{model}' after {timeout:.0f} s; "
                                 f"see {self.log_path}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


class Supervised:
    """A child started again with backoff whenever it exits, until the main job stops."""

    def __init__(self, name: str, start: Callable[[], None],
                 process: Callable[[], subprocess.Popen[bytes] | None], log_path: Path) -> None:
        self.name = name
        self._start = start
        self._process = process
        self.log_path = log_path
        self.started_at = time.monotonic()
        self.delay = RESTART_MIN_S
        self.restart_at: float | None = None
        self.restarts = 0

    def check(self) -> None:
        process = self._process()
        now = time.monotonic()
        if self.restart_at is None:
            if process is None or process.poll() is None:
                return
            if now - self.started_at > HEALTHY_RUN_S:
                self.delay = RESTART_MIN_S
            self.restart_at = now + self.delay
            print(f"{self.name} exited ({process.returncode}); starting it again in "
                  f"{self.delay:.0f} s (log: {self.log_path})", file=sys.stderr, flush=True)
            self.delay = min(RESTART_MAX_S, self.delay * 2)
            return
        if now < self.restart_at:
            return
        self.restart_at = None
        self.started_at = now
        self.restarts += 1
        try:
            self._start()
            print(f"{self.name} started again (restart {self.restarts}); the reconciler loads "
                  "what should run there", flush=True)
        except (RuntimeError, OSError) as exc:
            print(f"{self.name} did not start: {exc}", file=sys.stderr, flush=True)


def admin_usage(settings: Settings) -> str:
    return f"""Admin REST API: http://{settings.host}:{settings.port}/api/v1  (OpenAPI: /docs)
  database {settings.database_url}
  first token:  .venv/bin/llm-control-plane tokens create --name ops --scope admin
  then:         curl -s -H "Authorization: Bearer $TOKEN" http://{settings.host}:{settings.port}/api/v1/models
"""


class AdminApi:
    """The control plane's uvicorn server on a thread of this process."""

    def __init__(self, settings: Settings) -> None:
        ensure_sqlite_directory(settings.database_url)
        migrate.upgrade(settings.database_url)
        self.app = create_app(settings)
        self.server = uvicorn.Server(uvicorn.Config(
            self.app, host=settings.host, port=settings.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="admin-api", daemon=True)

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise SystemExit("the admin API did not start (is its port taken? set LLMCP_PORT)")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def deploy_demo(admin: AdminApi, settings: Settings, server: TritonServer, model: str,
                repository: Path) -> dict[str, object]:
    os.environ.setdefault("LLM_MODELS_DIR", str(CACHE_DIR / "models"))  # as the node has it
    engine_args = {key: os.path.expandvars(value) if isinstance(value, str) else value
                   for key, value in read_model_json(repository / model).items()}
    source = str(Path(engine_args["model"]).resolve())
    session_factory = admin.app.state.session_factory
    with transaction(session_factory) as session:
        number, registered = demo_deployment.register_demo(
            session, model, source, engine_args, ServingSettings(), settings.source_roots)
        demo_deployment.ensure_node(session, server.http_url, server.grpc_url, KEY_VARIABLE,
                                    server.metrics_url)
    return demo_deployment.deploy(session_factory, admin.app.state.operation_runner, model,
                                  number, registered)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help="the model under --repository to register and deploy")
    parser.add_argument("--repository", type=Path, default=PROJECT_ROOT / "model_repository",
                        help="where the demo model's model.json is read from (the node itself "
                             "starts with an empty repository)")
    parser.add_argument("--http-port", type=int, default=int(os.environ.get("LLMGW_HTTP_PORT", "8000")),
                        help="the gateway's public HTTP port (KServe v2 and OpenAI)")
    parser.add_argument("--grpc-port", type=int, default=int(os.environ.get("LLMGW_GRPC_PORT", "8001")),
                        help="the gateway's public gRPC port")
    parser.add_argument("--triton-http-port", type=int,
                        default=int(os.environ.get("TRITON_HTTP_PORT", "18000")),
                        help="the node's internal HTTP port (loopback only)")
    parser.add_argument("--triton-grpc-port", type=int,
                        default=int(os.environ.get("TRITON_GRPC_PORT", "18001")))
    parser.add_argument("--triton-metrics-port", type=int,
                        default=int(os.environ.get("TRITON_METRICS_PORT", "18002")))
    args = parser.parse_args()

    settings = Settings()
    os.environ[KEY_VARIABLE] = secrets.token_urlsafe(32)
    # tritonserver's environment, so the backend stub reads it; and the gateway's.
    gateway_secret = os.environ[GATEWAY_SECRET_VARIABLE] = secrets.token_urlsafe(32)
    admin = AdminApi(settings)
    empty_repository = CACHE_DIR / "node-repository"
    empty_repository.mkdir(parents=True, exist_ok=True)
    server = TritonServer(
        empty_repository,
        ports=TritonPorts(http=args.triton_http_port, grpc=args.triton_grpc_port,
                          metrics=args.triton_metrics_port),
        repository_key=os.environ[KEY_VARIABLE],
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

    admin.start()
    print(admin_usage(settings), flush=True)
    with transaction(admin.app.state.session_factory) as session:
        token = demo_access.gateway_token(session)
        key = demo_access.demo_key(session, DEMO_KEY_FILE)
    redis_url = os.environ.get("LLMGW_REDIS_URL") or local_redis()
    host, port = LOCAL_REDIS
    where = redis_url or f"the gateway process alone (no Redis answers on {host}:{port})"
    print(f"tenant limits counted in {where}", flush=True)
    gateway = GatewayProcess(
        GatewayPorts(os.environ.get("LLMGW_HOST", "127.0.0.1"), args.http_port, args.grpc_port),
        f"http://{settings.host}:{settings.port}", token, gateway_secret,
        settings={"LLMGW_REDIS_URL": redis_url} if redis_url else None)
    print(f"starting {server.runtime.binary} (log: {server.log_path})", flush=True)
    try:
        server.start()
        gateway.start()
        print(f"deploying '{args.model}' as production on node 'local' through the control "
              "plane (vLLM engine start takes ~30 s on a CPU)...", flush=True)
        started = time.monotonic()
        outcome = deploy_demo(admin, settings, server, args.model, args.repository)
        if outcome["status"] != "succeeded":
            print(f"deployment {outcome['id']} {outcome['status']}: {outcome['error']}",
                  file=sys.stderr)
            sys.exit(1)
        gateway.wait_serving(args.model, key)
        print(f"READY in {time.monotonic() - started:.1f} s (operation {outcome['id']})",
              flush=True)
        print(usage(gateway, server, args.model, key), flush=True)
        children = [Supervised("tritonserver", server.start, lambda: server.process,
                               server.log_path),
                    Supervised("the gateway", gateway.start, lambda: gateway.process,
                               gateway.log_path)]
        while not stop.wait(1.0):
            for child in children:
                child.check()
    finally:
        gateway.stop()
        admin.stop()
        print("stopping tritonserver...", flush=True)
        server.stop()


if __name__ == "__main__":
    main()
