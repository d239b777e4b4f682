"""Autoscaling against the real model: a load that steps up and back down, through the gateway.

A control plane (deciding every second, reading node metrics every second), two tritonserver nodes
and a gateway; model ``m`` (SmolLM2-135M-Instruct, 3 sequences at once per engine) served by its
production alias on node-a, with a scaling policy of 1..2 engines, 2 waiting requests per engine,
a 10 s scale-up window, a 30 s scale-down window and a 20 s cooldown. The load:
1. quiet: one client, requests back to back;
2. step up: twelve clients (a queue of about nine on one engine) until the second engine has
   served for ``--after-seconds``;
3. step down: one client again until the autoscaler has removed an engine.
Reported: seconds from the step up to the decision and to the new engine READY; TTFT p95 at the
backend (which holds requests in its own queue until an engine slot is free) and vLLM's own queue
time p95, both from the control plane's stats API, with one engine under the step and with two;
requests that failed (goal: 0); and engine-seconds used against two engines for the whole run.

    make bench-autoscale        (or: .venv/bin/python -m bench.autoscale --after-seconds 60)
"""

from __future__ import annotations

import argparse
import os
import secrets
import tempfile
import threading
import time
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any, Self

import httpx

from bench.common import free_port, print_table, write_results
from bench.gateway import deploy
from bench.lifecycle import KEY_VARIABLE, control_plane
from control_plane.serve import GatewayPorts, GatewayProcess
from control_plane.triton.runtime import CACHE_DIR
from control_plane.triton.server import TritonServer

MODEL = "m"
ENGINE_ARGS = {"max_model_len": 512, "max_num_seqs": 3, "enforce_eager": True}
POLICY = {"min_engines": 1, "max_engines": 2, "metric": "waiting_per_engine", "target": 2,
          "scale_up_window_s": 10, "scale_down_window_s": 30, "cooldown_s": 20}
SCALING = f"/api/v1/models/{MODEL}/aliases/production/scaling"
HEAVY_CLIENTS = 12
SAMPLING = {"max_tokens": 24}
TIMEOUT_S = 900.0


class Load:
    """Clients sending requests back to back through the gateway; their number can change."""

    def __init__(self, gateway_http: str, key: str) -> None:
        self.url = f"http://{gateway_http}/v2/models/{MODEL}/generate"
        self.headers = {"Authorization": f"Bearer {key}"}
        self.ok = 0
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._stops: list[threading.Event] = []
        self._threads: list[threading.Thread] = []

    def set_clients(self, count: int) -> None:
        while len(self._stops) < count:
            stop = threading.Event()
            thread = threading.Thread(target=self._run, args=(stop,), daemon=True)
            self._stops.append(stop)
            self._threads.append(thread)
            thread.start()
        while len(self._stops) > count:
            self._stops.pop().set()

    def _run(self, stop: threading.Event) -> None:
        with httpx.Client(headers=self.headers, timeout=600, trust_env=False) as client:
            while not stop.is_set():
                try:
                    answer = client.post(self.url, json={"text_input": "Count to fifty:",
                                                         "parameters": SAMPLING})
                    failure = None if answer.status_code == 200 else \
                        f"{answer.status_code} {answer.text[:200]}"
                except httpx.HTTPError as exc:
                    failure = f"{type(exc).__name__}: {exc}"
                with self._lock:
                    if failure is None:
                        self.ok += 1
                    else:
                        self.failures.append(failure)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.set_clients(0)
        for thread in self._threads:
            thread.join(timeout=600)


class EngineClock:
    """Samples the alias's engines (READY or loading) every second: engine-seconds used."""

    def __init__(self, api: httpx.Client) -> None:
        self.api = api
        self.engine_seconds = 0.0
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def engines(self) -> dict[str, str]:
        found = self.api.get("/api/v1/deployments", params={"model": MODEL}).json()["items"]
        return {d["node"]: d["state"] for d in found if d["wanted"]
                and d["state"] in ("PENDING", "LOADING", "READY")}

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(1.0):
            now = time.monotonic()
            self.engine_seconds += len(self.engines()) * (now - last)
            last = now

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.seconds = time.monotonic() - self.started


def wait_for(what: str, probe: Any, timeout: float = TIMEOUT_S) -> float:
    """Seconds until ``probe()`` is true."""
    started = time.monotonic()
    while not probe():
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(0.5)
    return time.monotonic() - started


def p95s(api: httpx.Client, seconds: float) -> tuple[float | None, float | None]:
    """(queue time p95 in vLLM's scheduler, TTFT p95 from the backend receiving the request)
    over the last ``seconds``: the backend holds requests in its own priority queue until an
    engine slot is free, so TTFT is where queueing shows; vLLM's own queue stays short."""
    stats = api.get(f"/api/v1/models/{MODEL}/stats",
                    params={"alias": "production", "window": f"{max(2, int(seconds))}s"}).json()
    total = stats["total"]
    if total is None:
        return None, None
    return total["queue_time_seconds"]["p95"], total["time_to_first_token_seconds"]["p95"]


def first_decision(api: httpx.Client, action: str, after: datetime) -> dict[str, Any]:
    items = api.get(f"{SCALING}/decisions", params={"limit": 500}).json()["items"]
    taken = [d for d in items if d["action"] == action and d["operation_id"]
             and datetime.fromisoformat(d["decided_at"]) >= after]
    if not taken:
        raise RuntimeError(f"no {action} decision after {after}")
    return taken[-1]


def measure(api: httpx.Client, load: Load, args: argparse.Namespace) -> dict[str, Any]:
    with EngineClock(api) as clock:
        load.set_clients(1)
        time.sleep(args.quiet_seconds)
        step_up_wall = datetime.now().astimezone()
        step_up = time.monotonic()
        load.set_clients(HEAVY_CLIENTS)
        print(f"step up to {HEAVY_CLIENTS} clients", flush=True)
        wait_for("a second engine", lambda: len(clock.engines()) == 2)
        to_decision = time.monotonic() - step_up
        wait_for("the second engine READY", lambda: set(clock.engines().values()) == {"READY"})
        to_ready = time.monotonic() - step_up
        one_engine_queue, one_engine_ttft = p95s(api, to_ready)
        print(f"second engine READY {to_ready:.0f} s after the step; one engine: TTFT p95 "
              f"{one_engine_ttft}", flush=True)
        time.sleep(args.after_seconds)
        two_engines_queue, two_engines_ttft = p95s(api, args.after_seconds)
        step_down_wall = datetime.now().astimezone()
        step_down = time.monotonic()
        load.set_clients(1)
        print("step down to 1 client", flush=True)
        wait_for("an engine removed", lambda: len(clock.engines()) == 1)
        to_removal = time.monotonic() - step_down
        time.sleep(5)
    up = first_decision(api, "scale_up", step_up_wall)
    down = first_decision(api, "scale_down", step_down_wall)
    decided_up = (datetime.fromisoformat(up["decided_at"]) - step_up_wall).total_seconds()
    decided_down = (datetime.fromisoformat(down["decided_at"]) - step_down_wall).total_seconds()
    return {
        "step_up_to_decision_s": round(decided_up, 1),
        "step_up_to_engine_seen_s": round(to_decision, 1),
        "step_up_to_ready_s": round(to_ready, 1),
        "ttft_p95_one_engine_s": one_engine_ttft,
        "ttft_p95_two_engines_s": two_engines_ttft,
        "vllm_queue_time_p95_one_engine_s": one_engine_queue,
        "vllm_queue_time_p95_two_engines_s": two_engines_queue,
        "step_down_to_decision_s": round(decided_down, 1),
        "step_down_to_removed_s": round(to_removal, 1),
        "run_seconds": round(clock.seconds, 1),
        "engine_seconds": round(clock.engine_seconds, 1),
        "fixed_max_engine_seconds": round(2 * clock.seconds, 1),
        "scale_up_reason": up["reason"], "scale_down_reason": down["reason"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quiet-seconds", type=float, default=20)
    parser.add_argument("--after-seconds", type=float, default=60,
                        help="how long the step runs on two engines")
    args = parser.parse_args()
    repository_key = secrets.token_urlsafe(24)
    secret = secrets.token_urlsafe(24)
    os.environ[KEY_VARIABLE] = repository_key
    os.environ["LLM_GATEWAY_SECRET"] = secret
    os.environ["LLMCP_STATS_POLL_INTERVAL_SECONDS"] = "1"
    os.environ["LLMCP_AUTOSCALE_INTERVAL_SECONDS"] = "1"
    with tempfile.TemporaryDirectory(prefix="bench-autoscale-") as workdir, ExitStack() as stack:
        nodes = {}
        for core, name in enumerate(("node-a", "node-b")):
            (Path(workdir) / name).mkdir()
            # Each node's engines on a core of their own, as on machines of their own: bound to
            # the same core, the busy engine starves the new one's start for minutes.
            node = TritonServer(Path(workdir) / name, repository_key=repository_key,
                                log_path=CACHE_DIR / "logs" / f"bench-autoscale-{name}.log",
                                environment={"VLLM_CPU_OMP_THREADS_BIND": str(core)})
            node.start()
            stack.callback(node.stop)
            nodes[name] = node
        api = stack.enter_context(control_plane(Path(workdir), repository_key))
        for name, node in nodes.items():
            api.post("/api/v1/nodes", json={
                "name": name, "http_url": f"http://{node.http_url}", "grpc_url": node.grpc_url,
                "metrics_url": node.metrics_url, "api_key_ref": f"env:{KEY_VARIABLE}"}
            ).raise_for_status()
        print("loading m on node-a", flush=True)
        deploy(api, MODEL, ENGINE_ARGS, ["node-a"])
        api.post("/api/v1/tenants", json={"name": "bench"}).raise_for_status()
        key = api.post("/api/v1/tenants/bench/keys", json={"name": "k"}).json()["key"]
        token = api.post("/api/v1/tokens", json={"name": "gateway", "scope": "report"}).json()
        gateway = GatewayProcess(
            GatewayPorts("127.0.0.1", free_port(), free_port()), str(api.base_url),
            token["secret"], secret, log_path=CACHE_DIR / "logs" / "bench-autoscale-gateway.log",
            settings={"LLMGW_ROUTING_WAIT_SECONDS": "5", "LLMGW_NODE_POLL_INTERVAL_SECONDS": "1"})
        gateway.start()
        stack.callback(gateway.stop)
        gateway.wait_serving(MODEL, key)
        api.put(SCALING, json=POLICY).raise_for_status()
        with Load(gateway.http_address, key) as load:
            results = measure(api, load, args)
        results["failed_requests"] = len(load.failures)
        results["requests"] = load.ok + len(load.failures)
        results["failure_samples"] = load.failures[:5]

    print_table("Autoscaling: a step of 1 -> 12 clients and back (seconds)",
                ["step up: decided", "engine READY", "step down: decided", "removed"],
                [[results["step_up_to_decision_s"], results["step_up_to_ready_s"],
                  results["step_down_to_decision_s"], results["step_down_to_removed_s"]]])
    print_table("Under the step (p95, seconds): TTFT at the backend (its queue included) and "
                "vLLM's own queue time; engine-seconds; failures",
                ["TTFT 1 engine", "TTFT 2 engines", "vLLM queue 1", "vLLM queue 2",
                 "engine-s used", "fixed 2 engines", "requests", "failed"],
                [[results["ttft_p95_one_engine_s"], results["ttft_p95_two_engines_s"],
                  results["vllm_queue_time_p95_one_engine_s"],
                  results["vllm_queue_time_p95_two_engines_s"],
                  results["engine_seconds"], results["fixed_max_engine_seconds"],
                  results["requests"], results["failed_requests"]]])
    write_results("autoscale", {**results, "policy": POLICY, "heavy_clients": HEAVY_CLIENTS,
                                "engine_args": ENGINE_ARGS,
                                "goals": {"failed_requests": "0",
                                          "ttft_p95_two_engines_s": "< ttft_p95_one_engine_s"}})


if __name__ == "__main__":
    main()
