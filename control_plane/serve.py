"""The main job: the control plane's admin REST API and, beside it, tritonserver in explicit
model-control mode with its repository API locked to a key only the control plane holds. The
demo LLM is registered, pointed at by ``production`` and deployed on that node through the
control plane (not loaded by a tritonserver flag), then served through our backend.

Run through ``make serve`` (which installs what is missing first). Stops cleanly on Ctrl-C/SIGTERM:
the admin API stops taking requests, Triton unloads the model, the backend drains in-flight
streams, the engine exits.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
import threading
import time
from pathlib import Path

import uvicorn

from control_plane import demo_deployment, migrate
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


def usage(server: TritonServer, model: str) -> str:
    http = server.http_url
    grpc = server.grpc_url
    return f"""
Model '{model}' is ready.
  HTTP  http://{http}    gRPC  {grpc}    metrics  {server.metrics_url}

Generate (one response):
  curl -s -X POST http://{http}/v2/models/{model}/generate \\
    -d '{{"text_input": "The capital of France is", "parameters": {{"max_tokens": 16, "temperature": 0}}}}'

Stream tokens (server-sent events), at priority level 1 (most urgent; default is 3):
  curl -s -N -X POST http://{http}/v2/models/{model}/generate_stream \\
    -d '{{"text_input": "Write a haiku about GPUs", "stream": true, "parameters": {{"max_tokens": 48, "priority": 1}}}}'

gRPC streaming (Python, tritonclient):
  .venv/bin/python -m control_plane.grpc_example --url {grpc} --model {model} "Write a haiku about GPUs"

Ctrl-C stops the server (in-flight streams are drained first).
"""


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
        demo_deployment.ensure_node(session, server.http_url, server.grpc_url, KEY_VARIABLE)
    return demo_deployment.deploy(session_factory, admin.app.state.operation_runner, model,
                                  number, registered)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help="the model under --repository to register and deploy")
    parser.add_argument("--repository", type=Path, default=PROJECT_ROOT / "model_repository",
                        help="where the demo model's model.json is read from (the node itself "
                             "starts with an empty repository)")
    parser.add_argument("--http-port", type=int, default=int(os.environ.get("TRITON_HTTP_PORT", 8000)))
    parser.add_argument("--grpc-port", type=int, default=int(os.environ.get("TRITON_GRPC_PORT", 8001)))
    parser.add_argument("--metrics-port", type=int,
                        default=int(os.environ.get("TRITON_METRICS_PORT", 8002)))
    args = parser.parse_args()

    settings = Settings()
    os.environ[KEY_VARIABLE] = secrets.token_urlsafe(32)
    admin = AdminApi(settings)
    empty_repository = CACHE_DIR / "node-repository"
    empty_repository.mkdir(parents=True, exist_ok=True)
    server = TritonServer(
        empty_repository,
        ports=TritonPorts(http=args.http_port, grpc=args.grpc_port, metrics=args.metrics_port),
        repository_key=os.environ[KEY_VARIABLE],
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

    admin.start()
    print(admin_usage(settings), flush=True)
    print(f"starting {server.runtime.binary} (log: {server.log_path})", flush=True)
    try:
        server.start()
        print(f"deploying '{args.model}' as production on node 'local' through the control "
              "plane (vLLM engine start takes ~30 s on a CPU)...", flush=True)
        started = time.monotonic()
        outcome = deploy_demo(admin, settings, server, args.model, args.repository)
        if outcome["status"] != "succeeded":
            print(f"deployment {outcome['id']} {outcome['status']}: {outcome['error']}",
                  file=sys.stderr)
            sys.exit(1)
        print(f"READY in {time.monotonic() - started:.1f} s (operation {outcome['id']})",
              flush=True)
        print(usage(server, args.model), flush=True)
        while not stop.wait(1.0):
            if server.process is not None and server.process.poll() is not None:
                print(f"tritonserver exited ({server.process.returncode}); see {server.log_path}",
                      file=sys.stderr)
                sys.exit(1)
    finally:
        admin.stop()
        print("stopping tritonserver...", flush=True)
        server.stop()


if __name__ == "__main__":
    main()
