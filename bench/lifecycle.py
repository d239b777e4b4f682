"""The deployment lifecycle through the control plane, against a real tritonserver and real vLLM.

A control plane serves in its own process (``llm-control-plane serve`` on a fresh SQLite database,
migrated and given an admin token by the CLI, reconciling every second), driving one tritonserver
node with an empty repository and a locked repository API; the model is SmolLM2-135M-Instruct.
Three measurements:
1. Deploy overhead: the time from ``PUT .../deployments/{node}`` to its operation's success
   (the deployment READY) vs Triton's own load time for the same version and config
   (``TritonGrpcControl.load`` of ``config_builder.load_request``, under another name), timed
   alternately, each unloaded before the next; medians and their ratio and difference. Triton's
   log also times the load inside each API deployment, which gives the control plane's own
   share without run-to-run noise.
2. Swaps under load: streaming clients send requests back to back over gRPC to the production
   model while the alias moves between two versions (different ``max_num_seqs``) several times,
   each time waiting for the swap operation, then for the replaced version's engine to stop
   (the backend's log line) and for Triton to unload it; every failed request is counted (goal:
   none). Triton r24.10 finalizes a version only once no gRPC stream whose first request went to
   it is open (llm_backend/serving_watch.py): the clients open their streams on the first
   version, so that version's unload comes only after they close, while its engine stops within
   the drain timeout all the same (``old_engine_stopped_after_s``).
3. Healing: two aliases deployed (production, staging); tritonserver is killed (-9) and, once
   the control plane shows both deployments UNKNOWN, started again on the same ports; the time
   until both are READY again, by the reconciler alone (no API call but GETs), and Triton agrees.

    make bench-lifecycle        (or: .venv/bin/python -m bench.lifecycle --runs 3 --swaps 5)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Self

import httpx

from bench.common import (
    CONTROL_PLANE_CLI,
    control_plane_cli,
    free_port,
    median,
    print_table,
    wait_control_plane_ready,
    write_results,
)
from control_plane.triton.config_builder import load_request
from control_plane.triton.grpc_control import TritonGrpcControl
from control_plane.triton.llm_client import GrpcStream
from control_plane.triton.runtime import CACHE_DIR
from control_plane.triton.server import TritonServer
from control_plane.triton.specs import VersionSpec

MODEL = "m"
NODE = "node-a"
DIRECT_NAME = "m_direct"
SOURCE_ROOT = CACHE_DIR / "models"
MODEL_SOURCE = SOURCE_ROOT / "SmolLM2-135M-Instruct"
KEY_VARIABLE = "LLMCP_BENCH_TRITON_KEY"
ENGINE_ARGS = {"max_model_len": 512, "max_num_seqs": 3, "enforce_eager": True}
# The second version differs only in what a swap may change without anyone noticing.
ENGINE_ARGS_V2 = {**ENGINE_ARGS, "max_num_seqs": 4}
TIMEOUT_S = 300.0
POLL_S = 0.05
# How long a replaced version may take to drain and unload (~10-15 s here) before going on.
OLD_VERSION_WAIT_S = 30.0
LOAD_PROMPT = "Write a sentence about rivers."
LOAD_SAMPLING = {"max_tokens": 24}
# Kept in the JSON so a failing run shows what went wrong, without flooding it.
ERROR_SAMPLES = 5


@contextmanager
def control_plane(workdir: Path, key: str) -> Iterator[httpx.Client]:
    """A migrated control plane serving in a subprocess; yields an admin client of its API."""
    port = free_port()
    env = {**os.environ, "LLMCP_DATABASE_URL": f"sqlite:///{workdir / 'control_plane.db'}",
           "LLMCP_HOST": "127.0.0.1", "LLMCP_PORT": str(port),
           "LLMCP_SOURCE_ROOTS": json.dumps([str(SOURCE_ROOT.resolve())]),
           "LLMCP_RECONCILE_INTERVAL_SECONDS": "1", KEY_VARIABLE: key}
    control_plane_cli(env, "migrate")
    token = control_plane_cli(env, "tokens", "create", "--name", "bench", "--scope", "admin").strip()
    log_path = CACHE_DIR / "logs" / "bench-lifecycle-control-plane.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen([str(CONTROL_PLANE_CLI), "serve"], env=env, stdout=log,
                                   stderr=subprocess.STDOUT)
    try:
        wait_control_plane_ready(process, f"http://127.0.0.1:{port}", log_path)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=60,
                          headers={"Authorization": f"Bearer {token}"}) as client:
            print(f"control plane: pid {process.pid}, port {port}, log {log_path}", flush=True)
            yield client
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _expect(response: httpx.Response, status: int, what: str) -> dict[str, Any]:
    if response.status_code != status:
        raise RuntimeError(f"{what}: expected {status}, got {response.status_code}: "
                           f"{response.text[:500]}")
    body: dict[str, Any] = response.json()
    return body


def _deployment_path(alias: str) -> str:
    return f"/api/v1/models/{MODEL}/aliases/{alias}/deployments/{NODE}"


@dataclass
class Finished:
    """An operation that ended, seen by polling it: its outcome and when it became visible."""

    operation: dict[str, Any]
    elapsed_s: float
    loading_after_s: float | None = None  # when the deployment was first seen LOADING
    seen_at: float = field(default_factory=time.time)  # wall clock, to compare with Triton's log

    @property
    def succeeded(self) -> bool:
        return self.operation["status"] == "succeeded"


def wait_operation(api: httpx.Client, location: str, started: float,
                   watch: str | None = None) -> Finished:
    """Poll the operation until it ends; with ``watch`` (a deployment path) note when that
    deployment is first seen LOADING."""
    loading_after: float | None = None
    deadline = started + TIMEOUT_S
    while time.monotonic() < deadline:
        operation = _expect(api.get(location), 200, f"GET {location}")
        if operation["status"] in ("succeeded", "failed"):
            return Finished(operation, time.monotonic() - started, loading_after)
        if watch is not None and loading_after is None and \
                api.get(watch).json().get("state") == "LOADING":
            loading_after = time.monotonic() - started
        time.sleep(POLL_S)
    raise RuntimeError(f"{location} did not finish within {TIMEOUT_S:g} s")


def _started(response: httpx.Response, what: str) -> str:
    if response.status_code != 202:
        raise RuntimeError(f"{what}: expected 202, got {response.status_code}: "
                           f"{response.text[:500]}")
    return response.headers["Location"]


def deploy(api: httpx.Client, alias: str) -> Finished:
    """PUT the deployment and wait for its operation; timed from just before the call."""
    path = _deployment_path(alias)
    started = time.monotonic()
    location = _started(api.put(path), f"deploy {alias}")
    return wait_operation(api, location, started, watch=path)


def remove(api: httpx.Client, alias: str) -> Finished:
    started = time.monotonic()
    return wait_operation(api, _started(api.delete(_deployment_path(alias)), f"remove {alias}"),
                          started)


class TritonLog:
    """Triton's own account of loads and unloads, read from its log (written line by line).

    It times the part of an API deployment that Triton spends loading, and it tells when an
    unload has really finished: the index stops listing a model loaded from config and files as
    soon as its unload begins, ~10 s before Triton has stopped its engine.
    """

    _LINE = re.compile(r'^I(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) +\d+ '
                       r'model_lifecycle\.cc:\d+\] "(.*)"$')

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        """A place in the log; later waits see only what comes after it."""
        return self.path.stat().st_size

    def times(self, since: int, message: str) -> list[float]:
        """When (as ``time.time()``) each line after ``since`` said ``message``."""
        with self.path.open("rb") as log:
            log.seek(since)
            lines = log.read().decode(errors="replace").splitlines()
        year = time.localtime().tm_year
        found = []
        for line in lines:
            match = self._LINE.match(line)
            if match is not None and match.group(7) == message:
                month, day, hour, minute, second, micro = map(int, match.groups()[:6])
                found.append(datetime(year, month, day, hour, minute, second, micro).timestamp())
        return found

    def wait(self, since: int, message: str, timeout_s: float = TIMEOUT_S) -> float:
        """When the first line after ``since`` said ``message``, waiting for it if need be."""
        found = self.poll(since, message, timeout_s)
        if found is None:
            raise RuntimeError(f"Triton did not log {message!r} within {timeout_s:g} s; see "
                               f"{self.path}")
        return found

    def seen(self, since: int, text: str, timeout_s: float) -> float | None:
        """When (``time.time()``, to the poll's 0.2 s) a line after ``since`` containing ``text``
        was first seen: for lines without Triton's timestamp, the backend's own."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self.path.open("rb") as log:
                log.seek(since)
                if text.encode() in log.read():
                    return time.time()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.2)

    def poll(self, since: int, message: str, timeout_s: float) -> float | None:
        deadline = time.monotonic() + timeout_s
        while not (found := self.times(since, message)):
            if time.monotonic() > deadline:
                return None
            time.sleep(0.2)
        return found[0]


def loaded_message(name: str) -> str:
    return f"successfully loaded '{name}'"


def unloaded_message(name: str, version: int) -> str:
    return f"successfully unloaded '{name}' version {version}"


def engine_stopped_message(name: str, version: int) -> str:
    """The backend's line once it has drained and stopped a version's engine (model.py)."""
    return f"llm_backend {name}/{version} engine stopped"


def direct_load(control: TritonGrpcControl, log: TritonLog, spec: VersionSpec) -> float:
    """Triton's own load time for ``spec`` under another name; unloads it again afterwards and
    returns once Triton has finished unloading it."""
    config_json, files = load_request(DIRECT_NAME, spec)
    started = time.monotonic()
    control.load(DIRECT_NAME, config_json, files)
    elapsed = time.monotonic() - started
    if not control.is_model_ready(DIRECT_NAME):
        raise RuntimeError(f"{DIRECT_NAME} loaded but is not ready")
    mark = log.mark()
    control.unload(DIRECT_NAME)
    log.wait(mark, unloaded_message(DIRECT_NAME, spec.number))
    return elapsed


@dataclass
class StreamingLoad:
    """Clients streaming completions back to back to one model, counting every failure."""

    grpc_url: str
    clients: int
    completed: int = 0
    failures: list[str] = field(default_factory=list)
    durations_s: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Self:
        self._threads = [threading.Thread(target=self._run, daemon=True)
                         for _ in range(self.clients)]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=180)

    def _run(self) -> None:
        stream = GrpcStream(self.grpc_url, MODEL)
        try:
            while not self._stop.is_set():
                stream.submit(LOAD_PROMPT, LOAD_SAMPLING)
                result = stream.wait(120)
                with self._lock:
                    if result.error is not None or not result.final:
                        self.failures.append(result.error or "no final response within 120 s")
                    else:
                        self.completed += 1
                        self.durations_s.append((result.done_at or 0.0) - result.submitted_at)
        finally:
            stream.close()

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.completed, len(self.failures)


def measure_deploy(api: httpx.Client, control: TritonGrpcControl, log: TritonLog,
                   spec: VersionSpec, runs: int) -> dict[str, Any]:
    """Interleaved in pairs whose order alternates (direct, API, API, direct, ...), so neither
    kind always goes first; the last is an API deployment, left READY for the swaps. Each load
    starts on an idle node: the one before it has finished unloading, by Triton's log."""
    first, second = ("direct", "api") if runs % 2 else ("api", "direct")
    sequence = [kind for i in range(runs)
                for kind in ((first, second) if i % 2 == 0 else (second, first))]
    api_runs: list[dict[str, Any]] = []
    direct_s: list[float] = []
    for index, kind in enumerate(sequence):
        if kind == "direct":
            direct_s.append(direct_load(control, log, spec))
            print(f"  deploy run {index + 1}/{len(sequence)}: direct Triton load "
                  f"{direct_s[-1]:.3f} s", flush=True)
            continue
        mark, called = log.mark(), time.time()
        done = deploy(api, "production")
        if not done.succeeded:
            raise RuntimeError(f"deploy failed: {done.operation}")
        load_began = log.wait(mark, f"loading: {MODEL}:{spec.number}", 0)
        load_ended = log.wait(mark, loaded_message(MODEL), 0)
        api_runs.append({
            "api_to_ready_s": done.elapsed_s, "seen_loading_after_s": done.loading_after_s,
            # Triton's side of this same deployment, and the control plane's before and after.
            "triton_load_inside_s": load_ended - load_began,
            "before_triton_load_s": load_began - called,
            "after_triton_load_s": done.seen_at - load_ended})
        print(f"  deploy run {index + 1}/{len(sequence)}: API to READY {done.elapsed_s:.3f} s "
              f"(Triton loading inside it {load_ended - load_began:.3f} s)", flush=True)
        if index < len(sequence) - 1:  # the last one stays for the swaps
            mark = log.mark()
            removed = remove(api, "production")
            if not removed.succeeded:
                raise RuntimeError(f"remove failed: {removed.operation}")
            # The operation succeeds once the index stops listing the model; Triton is still
            # stopping its engine then (see the report's notes).
            unloaded = log.wait(mark, unloaded_message(MODEL, spec.number))
            api_runs[-1]["remove_op_s"] = removed.elapsed_s
            api_runs[-1]["unloaded_after_remove_op_s"] = unloaded - removed.seen_at
    api_s = [r["api_to_ready_s"] for r in api_runs]
    inside_s = [r["triton_load_inside_s"] for r in api_runs]
    api_median, direct_median = median(api_s), median(direct_s)
    return {"order": sequence, "api_runs": api_runs, "api_to_ready_s": api_s,
            "triton_load_s": direct_s,
            "api_to_ready_median_s": api_median, "triton_load_median_s": direct_median,
            "overhead_median_s": api_median - direct_median,
            "ratio_median": api_median / direct_median,
            # The same comparison within each API deployment, free of run-to-run noise.
            "triton_load_inside_api_median_s": median(inside_s),
            "control_plane_overhead_per_run_s": [a - t for a, t in zip(api_s, inside_s,
                                                                       strict=True)],
            "control_plane_overhead_median_s": median([a - t for a, t in zip(api_s, inside_s,
                                                                            strict=True)])}


def _later(at: float | None, since: float) -> str:
    return f"not within {OLD_VERSION_WAIT_S:g} s" if at is None else f"{at - since:.3f} s later"


def measure_swaps(api: httpx.Client, log: TritonLog, grpc_url: str, versions: tuple[int, int],
                  swaps: int, clients: int) -> dict[str, Any]:
    """Move production back and forth under streaming load, waiting for each swap and then for
    the replaced version's engine to stop and Triton to unload it (up to ``OLD_VERSION_WAIT_S``
    each)."""
    alias_path = f"/api/v1/models/{MODEL}/aliases/production"
    rows: list[dict[str, Any]] = []
    phase_mark = log.mark()
    with StreamingLoad(grpc_url, clients) as load:
        time.sleep(2)  # every client has a request in flight before the first swap
        for index in range(swaps):
            current = _expect(api.get(alias_path), 200, "GET alias")["version"]
            target = versions[1] if current == versions[0] else versions[0]
            before = load.counts()
            mark, started = log.mark(), time.monotonic()
            response = api.put(alias_path, json={"version": target})
            done = wait_operation(api, _started(response, f"swap to {target}"), started)
            after = load.counts()
            serving = api.get(_deployment_path("production")).json()
            # The engine stops before Triton logs the unload, so the first wait times it well.
            engine_stopped = log.seen(mark, engine_stopped_message(MODEL, current),
                                      OLD_VERSION_WAIT_S)
            old_unloaded = log.poll(mark, unloaded_message(MODEL, current), OLD_VERSION_WAIT_S)
            drained = load.counts()
            rows.append({"from_version": current, "to_version": target,
                         "status": done.operation["status"], "error": done.operation["error"],
                         "duration_s": done.elapsed_s,
                         "completed_during": after[0] - before[0],
                         "failed_during": after[1] - before[1],
                         "serving_version_after": serving.get("serving_version"),
                         "state_after": serving.get("state"),
                         "old_engine_stopped_after_s": None if engine_stopped is None
                         else engine_stopped - done.seen_at,
                         "old_version_unloaded_after_s": None if old_unloaded is None
                         else old_unloaded - done.seen_at,
                         "failed_until_old_version_unloaded": drained[1] - after[1]})
            print(f"  swap {index + 1}/{swaps}: v{current} -> v{target} {done.operation['status']}"
                  f" in {done.elapsed_s:.3f} s; requests during it: {after[0] - before[0]} "
                  f"completed, {after[1] - before[1]} failed; v{current}'s engine stopped "
                  f"{_later(engine_stopped, done.seen_at)}, unloaded "
                  f"{_later(old_unloaded, done.seen_at)}", flush=True)
        time.sleep(2)  # requests after the last swap reach the version it left serving
    closed = time.time()

    def unloads() -> list[float]:
        return [t for version in set(versions)
                for t in log.times(phase_mark, unloaded_message(MODEL, version))]

    # A replaced version still loaded is visible only in Triton's log: give it a last chance
    # now that the clients have closed their streams.
    deadline = time.monotonic() + OLD_VERSION_WAIT_S
    while len(unloads()) < len(rows) and time.monotonic() < deadline:
        time.sleep(0.5)
    return {"clients": clients, "swaps": rows, "completed_requests": load.completed,
            "failed_requests": len(load.failures), "failure_samples": load.failures[:ERROR_SAMPLES],
            "request_p50_s": median(load.durations_s),
            "request_max_s": max(load.durations_s, default=float("nan")),
            "swap_duration_median_s": median([r["duration_s"] for r in rows]),
            "swaps_succeeded": sum(r["status"] == "succeeded" for r in rows),
            "replaced_engines_stopped_in_time": sum(r["old_engine_stopped_after_s"] is not None
                                                    for r in rows),
            "replaced_versions_unloaded": len(unloads()),
            "unloads_after_streams_closed_s": sorted(t - closed for t in unloads() if t > closed)}


def _states(api: httpx.Client, aliases: list[str]) -> dict[str, str]:
    states = {}
    for alias in aliases:
        response = api.get(_deployment_path(alias))
        states[alias] = response.json().get("state", f"HTTP {response.status_code}")
    return states


def _wait_states(api: httpx.Client, aliases: list[str], state: str, started: float
                 ) -> dict[str, float]:
    """Poll until every alias's deployment is ``state``; seconds from ``started`` for each."""
    seen: dict[str, float] = {}
    deadline = started + TIMEOUT_S
    while len(seen) < len(aliases):
        if time.monotonic() > deadline:
            raise RuntimeError(f"not all {state} within {TIMEOUT_S:g} s: {_states(api, aliases)}")
        for alias, current in _states(api, aliases).items():
            if current == state and alias not in seen:
                seen[alias] = time.monotonic() - started
        time.sleep(POLL_S)
    return seen


def measure_healing(api: httpx.Client, node: TritonServer, control: TritonGrpcControl,
                    log: TritonLog, restarts: int) -> dict[str, Any]:
    """Kill -9 the node; once the control plane shows its deployments UNKNOWN, start it again
    on the same ports and time until all are READY, with when Triton began and ended each load
    (the reconciler loads them side by side, up to LLMCP_NODE_PARALLEL_LOADS at once):
    ``over_slowest_load_s`` is how much longer than the slowest of those loads healing took."""
    aliases = ["production", "staging"]
    names = {"production": MODEL, "staging": f"{MODEL}.staging"}
    rows: list[dict[str, Any]] = []
    for index in range(restarts):
        killed = time.monotonic()
        node.kill()
        unknown = _wait_states(api, aliases, "UNKNOWN", killed)
        mark, started, started_wall = log.mark(), time.monotonic(), time.time()
        node.start()
        live_s = time.monotonic() - started
        ready = _wait_states(api, aliases, "READY", started)
        all_ready_s = max(ready.values())
        triton_ready = {alias: control.is_model_ready(names[alias]) for alias in aliases}
        versions = {alias: api.get(_deployment_path(alias)).json().get("serving_version")
                    for alias in aliases}
        triton_load = {alias: [log.wait(mark, f"loading: {names[alias]}:{versions[alias]}", 0)
                               - started_wall,
                               log.wait(mark, loaded_message(names[alias]), 0) - started_wall]
                       for alias in aliases}
        slowest = max(end - begin for begin, end in triton_load.values())
        rows.append({"seen_unknown_after_kill_s": max(unknown.values()),
                     "slowest_load_s": slowest, "over_slowest_load_s": all_ready_s - slowest,
                     "started_after_kill_s": started - killed, "live_after_start_s": live_s,
                     "ready_after_start_s": ready, "all_ready_after_start_s": all_ready_s,
                     "all_ready_after_kill_s": all_ready_s + started - killed,
                     "triton_load_began_and_ended_after_start_s": triton_load,
                     "triton_says_ready": triton_ready, "serving_versions": versions})
        each = ", ".join(f"{alias} {seconds:.3f} s" for alias, seconds in ready.items())
        print(f"  restart {index + 1}/{restarts}: all {len(aliases)} READY {all_ready_s:.3f} s "
              f"after the restart ({each}); Triton ready: {triton_ready}", flush=True)
    return {"aliases": aliases, "restarts": rows,
            "all_ready_after_start_median_s": median([r["all_ready_after_start_s"]
                                                      for r in rows]),
            "over_slowest_load_s": max(r["over_slowest_load_s"] for r in rows),
            "goals": {"over_slowest_load_s": "<= 5"}}


def register(api: httpx.Client, engine_args: dict[str, Any]) -> dict[str, Any]:
    return _expect(api.post(f"/api/v1/models/{MODEL}/versions", json={
        "source": str(MODEL_SOURCE.resolve()), "engine_args": engine_args}), 201,
        "register a version")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="deploys of each kind (API, direct)")
    parser.add_argument("--swaps", type=int, default=5)
    parser.add_argument("--clients", type=int, default=3, help="streaming clients during swaps")
    parser.add_argument("--restarts", type=int, default=2)
    args = parser.parse_args()
    if not MODEL_SOURCE.is_dir():
        raise SystemExit(f"{MODEL_SOURCE} is missing; run scripts/bootstrap.sh first")

    began = time.monotonic()
    key = secrets.token_urlsafe(24)
    data: dict[str, Any] = {"model": str(MODEL_SOURCE.name), "engine_args_v1": ENGINE_ARGS,
                            "engine_args_v2": ENGINE_ARGS_V2}
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-lifecycle-")))
        repository = workdir / "empty-repository"
        repository.mkdir()
        node = TritonServer(repository, repository_key=key,
                            log_path=CACHE_DIR / "logs" / "bench-lifecycle-tritonserver.log")
        node.start()
        stack.callback(node.stop)
        log = TritonLog(node.log_path)
        api = stack.enter_context(control_plane(workdir, key))
        control = stack.enter_context(TritonGrpcControl(node.grpc_url, repository_key=key))

        _expect(api.post("/api/v1/models", json={"name": MODEL}), 201, "create the model")
        _expect(api.post("/api/v1/nodes", json={
            "name": NODE, "http_url": f"http://{node.http_url}", "grpc_url": node.grpc_url,
            "api_key_ref": f"env:{KEY_VARIABLE}"}), 201, "register the node")
        v1, v2 = register(api, ENGINE_ARGS), register(api, ENGINE_ARGS_V2)
        numbers = (v1["number"], v2["number"])
        _expect(api.put(f"/api/v1/models/{MODEL}/aliases/production",
                        json={"version": numbers[0]}), 200, "point production at v1")
        spec = VersionSpec(model=MODEL, number=v1["number"], source=v1["source"],
                           engine_args=v1["engine_args"], serving=v1["serving"],
                           triton_config=v1["triton_config"])

        print(f"(1) deploy: API to READY vs Triton's own load, {args.runs} of each", flush=True)
        data["load_average_1m_before"] = {"deploy": os.getloadavg()[0]}
        data["deploy"] = measure_deploy(api, control, log, spec, args.runs)

        print(f"(2) {args.swaps} swaps under streaming load ({args.clients} clients)", flush=True)
        data["load_average_1m_before"]["swaps"] = os.getloadavg()[0]
        data["swaps"] = measure_swaps(api, log, node.grpc_url, numbers, args.swaps,
                                      args.clients)

        print(f"(3) kill -9 and restart the node, {args.restarts} times", flush=True)
        _expect(api.put(f"/api/v1/models/{MODEL}/aliases/staging",
                        json={"version": numbers[0]}), 200, "point staging at v1")
        staged = deploy(api, "staging")
        if not staged.succeeded:
            raise RuntimeError(f"deploying staging failed: {staged.operation}")
        data["load_average_1m_before"]["healing"] = os.getloadavg()[0]
        data["healing"] = measure_healing(api, node, control, log, args.restarts)
    data["total_run_s"] = time.monotonic() - began
    report(data)
    write_results("lifecycle", data)
    failed = data["swaps"]["failed_requests"]
    unswapped = args.swaps - data["swaps"]["swaps_succeeded"]
    if failed or unswapped:
        raise SystemExit(f"{failed} request(s) failed and {unswapped} swap(s) did not succeed "
                         "under load; see the JSON")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def report(data: dict[str, Any]) -> None:
    deploy_, swaps, healing = data["deploy"], data["swaps"], data["healing"]
    rows: list[list[Any]] = []
    api_runs = iter(deploy_["api_runs"])
    direct_runs = iter(deploy_["triton_load_s"])
    for index, kind in enumerate(deploy_["order"], 1):
        if kind == "direct":
            rows.append([index, "Triton load (direct)", next(direct_runs), "", "", "", ""])
            continue
        run = next(api_runs)
        rows.append([index, "API PUT to READY", run["api_to_ready_s"], run["triton_load_inside_s"],
                     run["before_triton_load_s"], run["after_triton_load_s"],
                     _seconds(run.get("unloaded_after_remove_op_s"))])
    print_table("(1) Deploy: PUT deployment to READY vs Triton's own load of the same version",
                ["run", "path", "seconds", "Triton load inside s", "before it s", "after it s",
                 "unloaded after remove op s"], rows)
    print(f"medians: API to READY {deploy_['api_to_ready_median_s']:.3f} s, Triton load "
          f"{deploy_['triton_load_median_s']:.3f} s; overhead {deploy_['overhead_median_s']:.3f} s"
          f" (difference of medians), ratio {deploy_['ratio_median']:.3f}; within each API run "
          f"(API to READY - Triton's load inside it): median "
          f"{deploy_['control_plane_overhead_median_s']:.3f} s")
    print_table(f"(2) Swaps under streaming load ({swaps['clients']} clients)",
                ["swap", "versions", "status", "seconds", "completed", "failed",
                 "old engine stopped after s", "old version unloaded after s",
                 "failed until then"],
                [[index, f"v{swap['from_version']} -> v{swap['to_version']}", swap["status"],
                  swap["duration_s"], swap["completed_during"], swap["failed_during"],
                  _seconds(swap["old_engine_stopped_after_s"]),
                  _seconds(swap["old_version_unloaded_after_s"]),
                  swap["failed_until_old_version_unloaded"]]
                 for index, swap in enumerate(swaps["swaps"], 1)])
    print(f"requests: {swaps['completed_requests']} completed, {swaps['failed_requests']} failed; "
          f"request p50 {swaps['request_p50_s']:.3f} s, max {swaps['request_max_s']:.3f} s; "
          f"replaced engines stopped within {OLD_VERSION_WAIT_S:g} s "
          f"{swaps['replaced_engines_stopped_in_time']} of {len(swaps['swaps'])}; replaced "
          f"versions unloaded {swaps['replaced_versions_unloaded']} of {len(swaps['swaps'])}")
    if swaps["unloads_after_streams_closed_s"]:
        print(f"{len(swaps['unloads_after_streams_closed_s'])} unloaded only once the clients had "
              "closed their streams: Triton r24.10 keeps the version a stream's first request "
              "went to until that stream ends (its engine stopped all the same, see above)")
    aliases = healing["aliases"]
    print_table("(3) kill -9, restart: until all desired models are READY (reconciler only)",
                ["restart", "UNKNOWN after kill s", "started after kill s",
                 *(f"{a} READY after start s" for a in aliases), "all READY after start s",
                 "all READY after kill s", "slowest load s", "over slowest load s"],
                [[index, r["seen_unknown_after_kill_s"], r["started_after_kill_s"],
                  *(r["ready_after_start_s"][a] for a in aliases), r["all_ready_after_start_s"],
                  r["all_ready_after_kill_s"], r["slowest_load_s"], r["over_slowest_load_s"]]
                 for index, r in enumerate(healing["restarts"], 1)])
    print(f"healing: at most {healing['over_slowest_load_s']:.3f} s over the slowest load "
          "(goal <= 5 s)")
    print(f"\ntotal run {data['total_run_s']:.1f} s")


if __name__ == "__main__":
    main()
