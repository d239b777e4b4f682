"""The main job: tritonserver in explicit model-control mode serving the demo LLM through our
backend, and beside it the control plane's admin REST API on its database.

Run through ``make serve`` (which installs what is missing first). Stops cleanly on Ctrl-C/SIGTERM:
the admin API stops taking requests, Triton unloads the model, the backend drains in-flight
streams, the engine exits.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

import tritonclient.http as httpclient
import uvicorn

from control_plane import migrate
from control_plane.app import create_app
from control_plane.db import ensure_sqlite_directory
from control_plane.settings import Settings
from control_plane.triton.runtime import PROJECT_ROOT
from control_plane.triton.server import TritonPorts, TritonServer

DEFAULT_MODEL = "smollm2"


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
        self.server = uvicorn.Server(uvicorn.Config(
            create_app(settings), host=settings.host, port=settings.port, log_level="warning"))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model directory under --repository")
    parser.add_argument("--repository", type=Path, default=PROJECT_ROOT / "model_repository")
    parser.add_argument("--http-port", type=int, default=int(os.environ.get("TRITON_HTTP_PORT", 8000)))
    parser.add_argument("--grpc-port", type=int, default=int(os.environ.get("TRITON_GRPC_PORT", 8001)))
    parser.add_argument("--metrics-port", type=int,
                        default=int(os.environ.get("TRITON_METRICS_PORT", 8002)))
    args = parser.parse_args()

    settings = Settings()
    admin = AdminApi(settings)
    server = TritonServer(
        args.repository,
        ports=TritonPorts(http=args.http_port, grpc=args.grpc_port, metrics=args.metrics_port),
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

    admin.start()
    print(admin_usage(settings), flush=True)
    print(f"starting {server.runtime.binary} (log: {server.log_path})", flush=True)
    try:
        server.start()
        print(f"loading '{args.model}' (vLLM engine start takes ~30 s on a CPU)...", flush=True)
        started = time.monotonic()
        with httpclient.InferenceServerClient(server.http_url, network_timeout=900) as client:
            client.load_model(args.model)
        print(f"loaded in {time.monotonic() - started:.1f} s", flush=True)
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
