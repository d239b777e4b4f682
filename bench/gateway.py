"""The gateway's cost and what it buys, measured in one run.

A control plane (its own process, SQLite), two tritonserver nodes with the real backend and model,
and two ``llm-gateway`` processes in front (one routing by load, one round-robin), as
``make serve`` runs them. Three measurements:

1. Overhead: the same prompts streamed straight to a node and through the gateway, alternating
   round by round, over HTTP SSE and gRPC, at concurrency 1 and 8: output tokens/s, TTFT, and
   the gateway's CPU time per 1,000 tokens (from /proc, the gateway process only).
2. Routing: node B busy with a background set of long streams sent to it directly (so the
   gateways see it only through the backend's waiting gauge); new requests through the load-aware
   gateway and the round-robin one, interleaved: TTFT p95 of each.
3. Protection: an 8 MB body through the gateway (refused; the node stays up) and then straight to
   node-b, which serves the model (the bundled r24.10 dies of it): node alive after, and time to
   the answer. Last, as it ends node-b.

    .venv/bin/python -m bench.gateway [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import psutil
import tritonclient.grpc.aio as grpcclient_aio

from bench.common import PROMPTS, free_port, median, percentile, print_table, write_results
from bench.lifecycle import KEY_VARIABLE, MODEL_SOURCE, control_plane
from control_plane.serve import GatewayPorts, GatewayProcess
from control_plane.triton.async_llm_client import grpc_stream, http_stream
from control_plane.triton.llm_client import StreamResult
from control_plane.triton.runtime import CACHE_DIR
from control_plane.triton.server import TritonServer

OVERHEAD_MODEL = "m"  # shipped engine settings: 9 sequences at once, so c=8 never queues
ROUTED_MODEL = "r"  # 2 sequences at once, so a background load queues on its node
OVERHEAD_ARGS = {"max_model_len": 2048, "max_num_seqs": 9, "enforce_eager": True}
ROUTED_ARGS = {"max_model_len": 512, "max_num_seqs": 2, "enforce_eager": True}
SAMPLING = {"max_tokens": 48, "temperature": 0, "ignore_eos": True}
ROUTED_SAMPLING = {"max_tokens": 16, "temperature": 0, "ignore_eos": True}
BACKGROUND_STREAMS = 4
BACKGROUND_SAMPLING = {"max_tokens": 100, "ignore_eos": True}
MiB = 1024 * 1024


def _tokens(result: StreamResult) -> int:
    return result.num_output_tokens or len(result.texts)


def _ttft_ms(result: StreamResult) -> float:
    assert result.first_token_at is not None
    return (result.first_token_at - result.submitted_at) * 1000


class Target:
    """One way to reach the model: a node directly or a gateway, over HTTP SSE or gRPC."""

    def __init__(self, name: str, http_url: str, grpc_url: str, model: str,
                 key: str | None = None) -> None:
        self.name, self.model = name, model
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.http = httpx.AsyncClient(base_url=f"http://{http_url}", headers=self.headers,
                                      timeout=httpx.Timeout(10, read=300),
                                      limits=httpx.Limits(max_connections=64))
        self.grpc = grpcclient_aio.InferenceServerClient(grpc_url)

    async def stream(self, protocol: str, prompt: str, sampling: dict[str, Any]) -> StreamResult:
        if protocol == "http":
            result = await http_stream(self.http, self.model, prompt, sampling)
        else:
            metadata = {"authorization": self.headers["Authorization"]} if self.headers else None
            result = await grpc_stream(self.grpc, self.model, prompt, sampling,
                                       headers=metadata)
        if result.error:
            raise RuntimeError(f"{self.name} {protocol}: {result.error}")
        return result

    async def close(self) -> None:
        await self.http.aclose()
        await self.grpc.close()


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


async def _round(target: Target, protocol: str, concurrency: int, offset: int
                 ) -> tuple[int, float, list[float]]:
    started = time.monotonic()
    results = await asyncio.gather(*(
        target.stream(protocol, PROMPTS[(offset + i) % len(PROMPTS)], SAMPLING)
        for i in range(concurrency)))
    return (sum(_tokens(r) for r in results), time.monotonic() - started,
            [_ttft_ms(r) for r in results])


async def overhead(direct: Target, gateway: Target, gateway_process: psutil.Process,
                   seconds: float) -> list[dict[str, Any]]:
    rows = []
    for protocol in ("http", "grpc"):
        for concurrency in (1, 8):
            totals = {"direct": [0, 0.0, []], "gateway": [0, 0.0, []]}
            cpu = 0.0
            await _round(direct, protocol, concurrency, 0)  # warm both paths
            await _round(gateway, protocol, concurrency, 0)
            deadline = time.monotonic() + seconds
            offset = 0
            while time.monotonic() < deadline:
                for name, target in (("direct", direct), ("gateway", gateway)):
                    before = _cpu_seconds(gateway_process)
                    tokens, elapsed, ttfts = await _round(target, protocol, concurrency, offset)
                    if name == "gateway":
                        cpu += _cpu_seconds(gateway_process) - before
                    totals[name][0] += tokens
                    totals[name][1] += elapsed
                    totals[name][2].extend(ttfts)
                offset += concurrency
            rate = {name: t[0] / t[1] for name, t in totals.items()}
            p50 = {name: median(t[2]) for name, t in totals.items()}
            rows.append({"protocol": protocol, "concurrency": concurrency,
                         "direct_tokens_per_s": round(rate["direct"], 1),
                         "gateway_tokens_per_s": round(rate["gateway"], 1),
                         "ratio": round(rate["gateway"] / rate["direct"], 3),
                         "direct_ttft_p50_ms": round(p50["direct"], 1),
                         "gateway_ttft_p50_ms": round(p50["gateway"], 1),
                         "added_ttft_p50_ms": round(p50["gateway"] - p50["direct"], 1),
                         "gateway_cpu_ms_per_1k_tokens": round(
                             cpu * 1000 / totals["gateway"][0] * 1000, 1),
                         "tokens": totals["gateway"][0] + totals["direct"][0]})
            print(f"  overhead {protocol} c={concurrency}: ratio {rows[-1]['ratio']}, added "
                  f"TTFT p50 {rows[-1]['added_ttft_p50_ms']} ms", flush=True)
    return rows


async def routing(busy_node: Target, least_loaded: Target, round_robin: Target, requests: int
                  ) -> dict[str, Any]:
    """TTFT of new requests while one node has a queue the gateways did not send it."""
    stop = asyncio.Event()

    async def background(index: int) -> None:
        while not stop.is_set():
            await busy_node.stream("grpc", PROMPTS[index % len(PROMPTS)], BACKGROUND_SAMPLING)

    load = [asyncio.create_task(background(i)) for i in range(BACKGROUND_STREAMS)]
    await asyncio.sleep(8)  # the queue forms and the gateways read the waiting gauge
    ttfts: dict[str, list[float]] = {"least_loaded": [], "round_robin": []}
    try:
        for index in range(requests):
            for name, target in (("least_loaded", least_loaded), ("round_robin", round_robin)):
                result = await target.stream("http", PROMPTS[index % len(PROMPTS)],
                                             ROUTED_SAMPLING)
                ttfts[name].append(_ttft_ms(result))
    finally:
        stop.set()
        for task in load:
            task.cancel()
        await asyncio.gather(*load, return_exceptions=True)
    p95 = {name: percentile(values, 0.95) for name, values in ttfts.items()}
    return {"requests_each": requests, "background_streams": BACKGROUND_STREAMS,
            "least_loaded_ttft_p50_ms": round(median(ttfts["least_loaded"]), 1),
            "least_loaded_ttft_p95_ms": round(p95["least_loaded"], 1),
            "round_robin_ttft_p50_ms": round(median(ttfts["round_robin"]), 1),
            "round_robin_ttft_p95_ms": round(p95["round_robin"], 1),
            "routing_ttft_p95_ratio": round(p95["least_loaded"] / p95["round_robin"], 3)}


def protection(gateway_http: str, key: str, nodes: dict[str, TritonServer]) -> dict[str, Any]:
    body = json.dumps({"text_input": "x" * (8 * MiB)}).encode()
    results = {}
    target = nodes["node-b"]
    for name, url, headers, node in (
            ("gateway", f"http://{gateway_http}/v2/models/{ROUTED_MODEL}/generate",
             {"Authorization": f"Bearer {key}"}, target),
            ("direct", f"http://{target.http_url}/v2/models/{ROUTED_MODEL}/generate", {},
             target)):
        started = time.monotonic()
        try:
            answer = httpx.post(url, content=body, headers=headers, timeout=120)
            outcome = f"{answer.status_code} {answer.text[:120]}"
        except httpx.HTTPError as exc:
            outcome = f"{type(exc).__name__}: {exc}"
        took = time.monotonic() - started
        time.sleep(2)
        alive = node.process is not None and node.process.poll() is None and node.is_live()
        results[name] = {"answer": outcome, "seconds_to_answer": round(took, 3),
                         "node_alive_after": alive,
                         "node_exit_code": None if alive else node.process.poll()}  # type: ignore[union-attr]
        print(f"  8 MB {name}: {outcome[:60]!r} in {took:.2f} s, node alive: {alive}", flush=True)
    return results


def deploy(api: httpx.Client, model: str, engine_args: dict[str, Any], nodes: list[str]) -> None:
    api.post("/api/v1/models", json={"name": model}).raise_for_status()
    created = api.post(f"/api/v1/models/{model}/versions", json={
        "source": str(MODEL_SOURCE), "engine_args": engine_args})
    created.raise_for_status()
    api.put(f"/api/v1/models/{model}/aliases/production",
            json={"version": created.json()["number"]}).raise_for_status()
    locations = []
    for node in nodes:
        started = api.put(f"/api/v1/models/{model}/aliases/production/deployments/{node}")
        started.raise_for_status()
        locations.append(started.headers["Location"])
    for location in locations:
        while (operation := api.get(location).json())["status"] not in ("succeeded", "failed"):
            time.sleep(0.5)
        if operation["status"] != "succeeded":
            raise RuntimeError(f"deploying {model}: {operation['error']}")


async def measure(args: argparse.Namespace, nodes: dict[str, TritonServer],
                  gateways: dict[str, GatewayProcess], key: str) -> dict[str, Any]:
    node_a, node_b = nodes["node-a"], nodes["node-b"]
    direct = Target("node-a", node_a.http_url, node_a.grpc_url, OVERHEAD_MODEL)
    through = Target("gateway", gateways["least_loaded"].http_address,
                     gateways["least_loaded"].grpc_address, OVERHEAD_MODEL, key)
    busy = Target("node-b", node_b.http_url, node_b.grpc_url, ROUTED_MODEL)
    least = Target("least_loaded", gateways["least_loaded"].http_address,
                   gateways["least_loaded"].grpc_address, ROUTED_MODEL, key)
    robin = Target("round_robin", gateways["round_robin"].http_address,
                   gateways["round_robin"].grpc_address, ROUTED_MODEL, key)
    try:
        process = psutil.Process(gateways["least_loaded"].process.pid)  # type: ignore[union-attr]
        print("overhead: straight to node-a vs through the gateway", flush=True)
        rows = await overhead(direct, through, process, args.seconds)
        print("routing: node-b queued by a background load the gateways did not send", flush=True)
        routed = await routing(busy, least, robin, args.routing_requests)
    finally:
        for target in (direct, through, busy, least, robin):
            await target.close()
    return {"overhead": rows, "routing": routed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20,
                        help="measuring time per protocol and concurrency")
    parser.add_argument("--routing-requests", type=int, default=20,
                        help="new requests through each gateway during the routing test")
    args = parser.parse_args()

    repository_key = secrets.token_urlsafe(24)
    secret = secrets.token_urlsafe(24)
    os.environ[KEY_VARIABLE] = repository_key
    os.environ["LLM_GATEWAY_SECRET"] = secret
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as workdir, ExitStack() as stack:
        nodes = {}
        for name in ("node-a", "node-b"):
            (Path(workdir) / name).mkdir()
            node = TritonServer(Path(workdir) / name, repository_key=repository_key,
                                log_path=CACHE_DIR / "logs" / f"bench-gateway-{name}.log")
            node.start()
            stack.callback(node.stop)
            nodes[name] = node
        api = stack.enter_context(control_plane(Path(workdir), repository_key))
        for name in ("node-a", "node-b"):
            node = nodes[name]
            api.post("/api/v1/nodes", json={
                "name": name, "http_url": f"http://{node.http_url}", "grpc_url": node.grpc_url,
                "metrics_url": node.metrics_url, "api_key_ref": f"env:{KEY_VARIABLE}"}
            ).raise_for_status()
        print("loading: m on node-a, r on node-a and node-b (a few minutes on a CPU)", flush=True)
        deploy(api, OVERHEAD_MODEL, OVERHEAD_ARGS, ["node-a"])
        deploy(api, ROUTED_MODEL, ROUTED_ARGS, ["node-a", "node-b"])
        api.post("/api/v1/tenants", json={"name": "bench"}).raise_for_status()
        key = api.post("/api/v1/tenants/bench/keys", json={"name": "k"}).json()["key"]
        token = api.post("/api/v1/tokens", json={"name": "gateway", "scope": "read"}).json()
        gateways = {}
        for policy in ("least_loaded", "round_robin"):
            gateway = GatewayProcess(
                GatewayPorts("127.0.0.1", free_port(), free_port()), str(api.base_url),
                token["secret"], secret, log_path=CACHE_DIR / "logs" / f"bench-gateway-{policy}.log",
                settings={"LLMGW_ROUTING_POLICY": policy, "LLMGW_ROUTING_WAIT_SECONDS": "5"})
            gateway.start()
            stack.callback(gateway.stop)
            gateway.wait_serving(ROUTED_MODEL, key)
            gateways[policy] = gateway
        results = asyncio.run(measure(args, nodes, gateways, key))
        print("protection: 8 MB body", flush=True)
        results["protection"] = protection(gateways["least_loaded"].http_address, key, nodes)

    rows = results["overhead"]
    print_table("Overhead: through the gateway vs straight to the node (same run, alternating)",
                ["protocol", "c", "direct tok/s", "gateway tok/s", "ratio", "TTFT p50 direct ms",
                 "gateway ms", "added ms", "gw CPU ms/1k tok"],
                [[r["protocol"], r["concurrency"], r["direct_tokens_per_s"],
                  r["gateway_tokens_per_s"], r["ratio"], r["direct_ttft_p50_ms"],
                  r["gateway_ttft_p50_ms"], r["added_ttft_p50_ms"],
                  r["gateway_cpu_ms_per_1k_tokens"]] for r in rows])
    routed = results["routing"]
    print_table("Routing: new requests while node-b is queued (TTFT ms)",
                ["policy", "p50", "p95"],
                [["least_loaded", routed["least_loaded_ttft_p50_ms"],
                  routed["least_loaded_ttft_p95_ms"]],
                 ["round_robin", routed["round_robin_ttft_p50_ms"],
                  routed["round_robin_ttft_p95_ms"]]])
    guarded = results["protection"]
    print_table("Protection: an 8 MB body", ["path", "answer", "seconds", "node alive after"],
                [[name, r["answer"][:50], r["seconds_to_answer"], r["node_alive_after"]]
                 for name, r in guarded.items()])
    summary = {
        "gateway_ratio_c1": min(r["ratio"] for r in rows if r["concurrency"] == 1),
        "gateway_ratio_c8": min(r["ratio"] for r in rows if r["concurrency"] == 8),
        "added_ttft_p50_ms": max(r["added_ttft_p50_ms"] for r in rows),
        "gateway_cpu_ms_per_1k_tokens": max(r["gateway_cpu_ms_per_1k_tokens"] for r in rows),
        "routing_ttft_p95_ratio": routed["routing_ttft_p95_ratio"],
        "node_alive_after_8mb_via_gateway": guarded["gateway"]["node_alive_after"],
        "node_alive_after_8mb_direct": guarded["direct"]["node_alive_after"],
    }
    print("\n" + "\n".join(f"{k}: {v}" for k, v in summary.items()))
    print("goals: gateway_ratio_c1/c8 >= 0.97, added_ttft_p50_ms <= 3, "
          "routing_ttft_p95_ratio < 1, node alive via the gateway")
    write_results("gateway", {**summary, **results, "seconds_per_cell": args.seconds,
                              "goals": {"gateway_ratio_c1": ">= 0.97", "gateway_ratio_c8": ">= 0.97",
                                        "added_ttft_p50_ms": "<= 3",
                                        "routing_ttft_p95_ratio": "< 1 (lower is better)",
                                        "node_alive_after_8mb_via_gateway": True}})


if __name__ == "__main__":
    main()
