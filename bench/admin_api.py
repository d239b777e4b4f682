"""Latency and throughput of the control plane's admin REST API, on SQLite and on PostgreSQL.

A real server (``llm-control-plane serve``: uvicorn in its own process, migrated and given a write
token by the CLI, as an operator would) is driven over loopback by closed-loop clients: each of
the 16 sends its next request as soon as the last one ends, over a keep-alive httpx client of its
own. The clients are spread over ``--client-processes`` processes (4 by default, 4 clients each):
16 client threads in one Python process queue for its interpreter lock, and what they then
measured was their own queue as much as the server (``--client-processes 1`` measures that way,
as runs before 2026-12-04 did). Two operations, each with a warm-up and then a measured phase of
fixed length:
- read: ``GET /api/v1/models/{m}/versions``, the default page, on a model with 50 versions;
- write: ``POST /api/v1/models/{m}/versions``, registering a small local directory (the server
  checksums it), every client on the same model.
Any non-2xx answer counts as an error. Each database is measured with one API worker and with
several (``--workers 1 2``: ``llm-control-plane serve --workers N``), PostgreSQL also with its
read cache off (``--read-cache on off``; SQLite has none), so the run shows what the cache does. Goals (issue 16), at
concurrency 16 on this machine: read p99 <= 25 ms and write p99 <= 60 ms on PostgreSQL; write p99
<= 200 ms on SQLite; the JSON records each measured value and whether it was met.

    make bench-admin-api        (or: .venv/bin/python -m bench.admin_api --seconds 10)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import secrets
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from bench.common import (
    CONTROL_PLANE_CLI,
    control_plane_cli,
    free_port,
    percentile,
    print_table,
    run_concurrently,
    wait_control_plane_ready,
    write_results,
)
from control_plane.triton.runtime import CACHE_DIR

POSTGRES_SERVER_URL = os.environ.get(
    "LLMCP_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
BACKENDS = ("sqlite", "postgresql")
OPERATIONS = ("read", "write")
MODEL = "bench"
# (database, operation) -> p99 goal in ms, at GOAL_CONCURRENCY.
GOALS_P99_MS = {("postgresql", "read"): 25.0, ("postgresql", "write"): 60.0,
                ("sqlite", "write"): 200.0}
GOAL_CONCURRENCY = 16
# The console script next to the interpreter running the benchmark: the same virtual environment.
VERSION_BODY_ENGINE_ARGS = {"max_model_len": 512}
# Seconds between handing the client processes their work and their start, for their imports.
CLIENT_START_S = 3.0
# Kept in the JSON so a failing run shows what the server said, without flooding it.
ERROR_SAMPLES = 5

Request = Callable[[httpx.Client], httpx.Response]


@dataclass
class Phase:
    """What the clients of one measured phase saw."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        requests = len(self.latencies_ms) + len(self.errors)
        return {
            "requests": requests,
            "errors": len(self.errors),
            "requests_per_s": requests / self.elapsed_s if self.elapsed_s else 0.0,
            "p50_ms": percentile(self.latencies_ms, 0.50),
            "p90_ms": percentile(self.latencies_ms, 0.90),
            "p99_ms": percentile(self.latencies_ms, 0.99),
            "max_ms": max(self.latencies_ms, default=float("nan")),
            "elapsed_s": self.elapsed_s,
            "error_samples": self.errors[:ERROR_SAMPLES],
        }


@contextmanager
def fresh_database(backend: str, directory: Path) -> Iterator[str]:
    """The URL of a new, empty database on ``backend``, dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{directory / 'control_plane.db'}"
        return
    server = create_engine(POSTGRES_SERVER_URL, isolation_level="AUTOCOMMIT")
    name = f"llmcp_bench_{secrets.token_hex(6)}"
    try:
        try:
            with server.connect() as connection:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
        except OperationalError as exc:
            raise SystemExit(f"PostgreSQL at {POSTGRES_SERVER_URL} is unreachable ({exc.orig}); "
                             "start it, point LLMCP_BENCH_POSTGRES_URL at one, or run "
                             "--backends sqlite") from exc
        try:
            yield make_url(POSTGRES_SERVER_URL).set(database=name).render_as_string(
                hide_password=False)
        finally:
            with server.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        server.dispose()


@dataclass
class Server:
    """A control plane serving in a subprocess, and the write token the benchmark uses."""

    base_url: str
    token: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def cpu_seconds(self) -> float:
        """CPU time the server's processes (its workers included) have used so far."""
        main = psutil.Process(self.process.pid)
        total = 0.0
        for process in [main, *main.children(recursive=True)]:
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
        return total

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"the control plane exited ({self.process.returncode}) during the "
                               f"benchmark; see {self.log_path}")


@contextmanager
def control_plane(backend: str, database_url: str, source_root: Path, workers: int,
                  read_cache: bool = True) -> Iterator[Server]:
    """A migrated control plane serving on a free loopback port."""
    port = free_port()
    env = {**os.environ, "LLMCP_DATABASE_URL": database_url, "LLMCP_HOST": "127.0.0.1",
           "LLMCP_READ_CACHE": str(read_cache).lower(),
           "LLMCP_PORT": str(port), "LLMCP_SOURCE_ROOTS": json.dumps([str(source_root)])}
    control_plane_cli(env, "migrate")
    token = control_plane_cli(env, "tokens", "create", "--name", "bench", "--scope", "write").strip()
    log_path = CACHE_DIR / "logs" / f"bench-admin-api-{backend}-{workers}w-server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen([str(CONTROL_PLANE_CLI), "serve", "--workers", str(workers)],
                                   env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            base_url = f"http://127.0.0.1:{port}"
            wait_control_plane_ready(process, base_url, log_path)
            print(f"control plane on {backend}: pid {process.pid}, {base_url}, log {log_path}",
                  flush=True)
            yield Server(base_url, token, process, log_path)
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@dataclass(frozen=True)
class ClientWork:
    """What one client process does: its clients send ``operation`` back to back, from
    ``start_at`` (wall clock, so every process starts together) for a warm-up, then measured."""

    base_url: str
    token: str
    operation: str
    path: str
    body: dict[str, Any]
    clients: int
    start_at: float
    warmup_s: float
    seconds: float


def _request(work: ClientWork) -> Request:
    if work.operation == "read":
        return lambda client: client.get(work.path)
    return lambda client: client.post(work.path, json=work.body)


def client_process(work: ClientWork) -> tuple[Phase, float]:
    """Run in a process of the pool: the measured phase, and the CPU seconds it took here."""
    with ExitStack() as stack:
        clients = [stack.enter_context(httpx.Client(
            base_url=work.base_url, headers={"Authorization": f"Bearer {work.token}"},
            trust_env=False, timeout=60)) for _ in range(work.clients)]
        time.sleep(max(0.0, work.start_at - time.time()))
        closed_loop(clients, _request(work), work.warmup_s)
        cpu = time.process_time()
        phase = closed_loop(clients, _request(work), work.seconds)
        return phase, time.process_time() - cpu


def closed_loop(clients: list[httpx.Client], request: Request, seconds: float) -> Phase:
    """Every client sends ``request`` back to back until ``seconds`` have passed."""
    stop_at = time.monotonic() + seconds

    def worker(client: httpx.Client) -> Callable[[], Phase]:
        def run() -> Phase:
            seen = Phase()
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                try:
                    response = request(client)
                except httpx.HTTPError as exc:
                    seen.errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                if response.is_success:
                    seen.latencies_ms.append((time.perf_counter() - started) * 1000)
                else:
                    seen.errors.append(f"{response.status_code}: {response.text[:300]}")
            return seen
        return run

    started = time.monotonic()
    seen: list[Phase] = run_concurrently([worker(c) for c in clients])
    return Phase(latencies_ms=[ms for p in seen for ms in p.latencies_ms],
                 errors=[e for p in seen for e in p.errors],
                 elapsed_s=time.monotonic() - started)


def _expect(response: httpx.Response, status: int, what: str) -> httpx.Response:
    if response.status_code != status:
        raise RuntimeError(f"{what}: expected {status}, got {response.status_code}: "
                           f"{response.text[:500]}")
    return response


def measure_backend(backend: str, workers: int, read_cache: bool, args: argparse.Namespace,
                    workdir: Path) -> dict[str, Any]:
    """Serve a fresh database on ``backend``, seed it, then measure reads and writes."""
    source_root = workdir / "sources"
    source = source_root / "tiny-model"
    source.mkdir(parents=True)
    (source / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    versions_path = f"/api/v1/models/{MODEL}/versions"
    body = {"source": str(source), "engine_args": VERSION_BODY_ENGINE_ARGS}

    with ExitStack() as stack:
        url = stack.enter_context(fresh_database(backend, workdir))
        server = stack.enter_context(control_plane(backend, url, source_root, workers,
                                                   read_cache))
        seeder = stack.enter_context(httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {server.token}"},
            trust_env=False, timeout=60))
        _expect(seeder.post("/api/v1/models", json={"name": MODEL, "description": "benchmark"}),
                201, "create the model")
        # The first registration waits for vLLM's engine argument names, read once per process.
        started = time.perf_counter()
        _expect(seeder.post(versions_path, json=body), 201, "register the first version")
        first_write_ms = (time.perf_counter() - started) * 1000
        for _ in range(args.versions - 1):
            _expect(seeder.post(versions_path, json=body), 201, "seed a version")
        page = _expect(seeder.get(versions_path), 200, "list the versions").json()
        if page["total"] != args.versions:
            raise RuntimeError(f"the model has {page['total']} versions, not {args.versions}")

        results: dict[str, Any] = {"first_write_ms": first_write_ms,
                                   "read_page_items": len(page["items"]),
                                   "client_processes": args.client_processes}
        pool = stack.enter_context(multiprocessing.get_context("spawn").Pool(
            args.client_processes))
        shares = [args.concurrency // args.client_processes
                  + (index < args.concurrency % args.client_processes)
                  for index in range(args.client_processes)]
        for operation in args.operations:
            # Far enough ahead for every process of the pool to have imported what it needs.
            start_at = time.time() + CLIENT_START_S
            works = [ClientWork(server.base_url, server.token, operation, versions_path, body,
                                share, start_at, args.warmup, args.seconds)
                     for share in shares if share]
            pending = pool.map_async(client_process, works)
            time.sleep(max(0.0, start_at + args.warmup - time.time()))
            load = os.getloadavg()[0]
            server_cpu = server.cpu_seconds()
            seen: list[tuple[Phase, float]] = pending.get()
            server_cpu = server.cpu_seconds() - server_cpu
            server.check_alive()
            phase = Phase(latencies_ms=[ms for p, _ in seen for ms in p.latencies_ms],
                          errors=[e for p, _ in seen for e in p.errors],
                          elapsed_s=max(p.elapsed_s for p, _ in seen))
            summary = phase.summary()
            # CPU per request tells the server's cost apart from waiting for a busy machine.
            per_request = 1000 / max(1, summary["requests"])
            results[operation] = {
                **summary, "load_average_1m_before": load,
                "server_cpu_ms_per_request": server_cpu * per_request,
                "client_cpu_ms_per_request": sum(cpu for _, cpu in seen) * per_request,
            }
            print(f"  {backend}, {workers} worker(s), {operation}: "
                  f"{results[operation]['requests']} requests", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of a measured phase")
    parser.add_argument("--warmup", type=float, default=2.0, help="warm-up before each phase (s)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--client-processes", type=int, default=4,
                        help="processes the concurrent clients are spread over")
    parser.add_argument("--versions", type=int, default=50, help="versions seeded before reads")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--operations", nargs="+", choices=OPERATIONS, default=list(OPERATIONS))
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2],
                        help="API worker counts to measure each database with")
    parser.add_argument("--read-cache", nargs="+", choices=("on", "off"), default=["on", "off"],
                        help="measure PostgreSQL with the read cache on (the default) and off "
                             "(LLMCP_READ_CACHE=false); SQLite has none, so it runs once")
    args = parser.parse_args()

    # database -> configuration ("2": two workers; "2, cache off") -> results
    measured: dict[str, dict[str, dict[str, Any]]] = {}
    for backend in args.backends:
        caches = args.read_cache if backend == "postgresql" else ["on"]
        for cache in caches:
            for workers in args.workers:
                label = str(workers) if cache == "on" else f"{workers}, cache off"
                with tempfile.TemporaryDirectory(prefix=f"bench-admin-api-{backend}-") as workdir:
                    measured.setdefault(backend, {})[label] = measure_backend(
                        backend, workers, cache == "on", args, Path(workdir))

    rows = [[backend, label, operation, r[operation]["requests"], r[operation]["errors"],
             r[operation]["requests_per_s"], r[operation]["p50_ms"], r[operation]["p90_ms"],
             r[operation]["p99_ms"], r[operation]["max_ms"],
             r[operation]["server_cpu_ms_per_request"], r[operation]["load_average_1m_before"]]
            for backend, by_label in measured.items() for label, r in by_label.items()
            for operation in args.operations]
    print_table(f"Admin API at concurrency {args.concurrency} over {args.client_processes} client "
                f"process(es) ({args.seconds:g} s per phase, {args.versions} versions seeded; "
                "read = GET versions, write = POST versions)",
                ["database", "workers", "operation", "requests", "errors", "req/s", "p50 ms",
                 "p90 ms", "p99 ms", "max ms", "server CPU ms/req", "load 1m"], rows)
    data: dict[str, Any] = {"concurrency": args.concurrency,
                            "client_processes": args.client_processes,
                            "phase_seconds": args.seconds,
                            "warmup_seconds": args.warmup, "seeded_versions": args.versions,
                            "results": measured}
    # The goals are judged at the concurrency only, on the best worker count measured with
    # the product's defaults (the read cache on); other runs are explorations.
    if args.concurrency == GOAL_CONCURRENCY:
        goals = []
        for (backend, operation), threshold in GOALS_P99_MS.items():
            if backend not in measured or operation not in args.operations:
                continue
            by_workers = {w: r[operation]["p99_ms"] for w, r in measured[backend].items()
                          if w.isdigit()}
            if not by_workers:
                continue
            best = min(by_workers, key=lambda w: by_workers[w])
            goals.append({"database": backend, "operation": operation, "threshold_ms": threshold,
                          "p99_ms_by_workers": by_workers, "best_workers": int(best),
                          "met": by_workers[best] <= threshold})
            print(f"goal: {backend} {operation} p99 <= {threshold:g} ms at concurrency "
                  f"{GOAL_CONCURRENCY}: {'met' if by_workers[best] <= threshold else 'MISSED'} "
                  f"(p99 by workers: " + ", ".join(f"{w}: {v:.1f} ms"
                                                    for w, v in by_workers.items()) + ")")
        data["goals"] = goals
    write_results("admin_api", data)
    errors = sum(r[op]["errors"] for by_label in measured.values()
                 for r in by_label.values() for op in args.operations)
    if errors:
        raise SystemExit(f"{errors} request(s) failed; see error_samples in the JSON")


if __name__ == "__main__":
    main()
