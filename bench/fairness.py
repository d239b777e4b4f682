"""Fair share inside a priority level under a flood: tenant B's time to first token while tenant A
keeps the engine saturated at the same level, with the backend's fair share (tenants sent, as
the gateway sends them) and first come, first served (the same requests sent without tenants:
one shared tenant, served in arrival order), both divided by B's TTFT with the engine to itself.

One model (``max_num_seqs`` 2 by default: saturation is cheap on a CPU), all at level 3. A runs
``--flood`` closed-loop streams (each sends its next request as soon as the last one ends, ~10×
B's rate); B sends one request every ``--interval`` seconds. Phases: B alone, flood + fair
share, flood + FIFO. Also the token service ratio between two backlogged tenants with weights
2:1 (fair share phase with weights). Goal (issue 14): ``fair_ttft_p95_ratio`` ≤ 1.5.

    make bench-fairness        (or: .venv/bin/python -m bench.fairness --seconds 30)
"""

from __future__ import annotations

import argparse
import os
import secrets
import threading
import time
from typing import Any

from bench.common import Variant, load_variant, print_table, start_server, write_results
from control_plane.triton.llm_client import GrpcStream
from control_plane.triton.server import TritonServer
from llm_backend.gateway_trust import GATEWAY_SECRET_ENV

MODEL = "smollm2_fair"
PROMPT = "Write one sentence about the sea:"
A_SAMPLING = {"max_tokens": 48, "ignore_eos": True, "temperature": 0}
B_SAMPLING = {"max_tokens": 8, "ignore_eos": True, "temperature": 0}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def one(server: TritonServer, sampling: dict[str, Any], parameters: dict[str, Any] | None
        ) -> tuple[float, int]:
    """(TTFT seconds, output tokens) of one streamed request."""
    stream = GrpcStream(server.grpc_url, MODEL)
    try:
        stream.submit(PROMPT, sampling, parameters=parameters)
        result = stream.wait(600)
    finally:
        stream.close(cancel=stream.result.done_at is None)
    if result.error or result.first_token_at is None:
        raise RuntimeError(f"request failed: {result.error}")
    return result.first_token_at - result.submitted_at, result.num_output_tokens


def tenant(name: str | None, secret: str, weight: float = 1.0) -> dict[str, Any] | None:
    if name is None:
        return None
    parameters: dict[str, Any] = {"tenant": name, "gateway_secret": secret}
    if weight != 1.0:
        parameters["tenant_weight"] = weight
    return parameters


def phase(server: TritonServer, seconds: float, interval: float, flood: int, secret: str,
          with_tenants: bool) -> dict[str, Any]:
    stop = threading.Event()
    a_tokens = [0]

    def flooder() -> None:
        while not stop.is_set():
            _, tokens = one(server, A_SAMPLING, tenant("A" if with_tenants else None, secret))
            a_tokens[0] += tokens

    threads = [threading.Thread(target=flooder, daemon=True) for _ in range(flood)]
    for thread in threads:
        thread.start()
    if flood:
        time.sleep(3.0)  # the flood's backlog builds first
    ttfts: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.monotonic()
        ttft, _ = one(server, B_SAMPLING, tenant("B" if with_tenants else None, secret))
        ttfts.append(ttft)
        time.sleep(max(0.0, interval - (time.monotonic() - started)))
    stop.set()
    for thread in threads:
        thread.join(timeout=600)
    return {"b_requests": len(ttfts), "b_ttft_p50_s": round(percentile(ttfts, 0.5), 3),
            "b_ttft_p95_s": round(percentile(ttfts, 0.95), 3)}


def weighted(server: TritonServer, seconds: float, secret: str) -> dict[str, Any]:
    """Two tenants, both backlogged (4 closed-loop streams each), weights 2:1."""
    stop = threading.Event()
    tokens = {"heavy": 0, "light": 0}
    lock = threading.Lock()

    def client(name: str, weight: float) -> None:
        while not stop.is_set():
            _, count = one(server, A_SAMPLING, tenant(name, secret, weight))
            with lock:
                tokens[name] += count

    threads = [threading.Thread(target=client, args=(name, weight), daemon=True)
               for name, weight in (("heavy", 2.0), ("light", 1.0)) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    with lock:
        served = dict(tokens)
    stop.set()
    for thread in threads:
        thread.join(timeout=600)
    ratio = served["heavy"] / served["light"] if served["light"] else None
    return {"tokens": served, "service_ratio": None if ratio is None else round(ratio, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--flood", type=int, default=4)
    parser.add_argument("--max-num-seqs", type=int, default=2)
    args = parser.parse_args()
    secret = secrets.token_urlsafe(16)
    os.environ[GATEWAY_SECRET_ENV] = secret  # tritonserver's environment: the node trusts it
    server = start_server("fairness")
    try:
        load_variant(server, Variant(MODEL, {"reserved_urgent_slots": "0"},
                                     {"max_num_seqs": args.max_num_seqs}))
        one(server, B_SAMPLING, None)  # warm-up
        alone = phase(server, args.seconds, args.interval, 0, secret, True)
        fair = phase(server, args.seconds, args.interval, args.flood, secret, True)
        fifo = phase(server, args.seconds, args.interval, args.flood, secret, False)
        weights = weighted(server, args.seconds, secret)
    finally:
        server.stop()
    base = alone["b_ttft_p95_s"]
    data = {"max_num_seqs": args.max_num_seqs, "flood_streams": args.flood,
            "b_interval_s": args.interval, "phases": {"alone": alone, "fair": fair, "fifo": fifo},
            "fair_ttft_p95_ratio": round(fair["b_ttft_p95_s"] / base, 3),
            "fifo_ttft_p95_ratio": round(fifo["b_ttft_p95_s"] / base, 3),
            "goal_fair_ttft_p95_ratio": 1.5,
            "weighted_2_to_1": weights}
    data["goal_met"] = data["fair_ttft_p95_ratio"] <= 1.5
    print_table("tenant B's time to first token (s) at level 3",
                ["phase", "B requests", "p50", "p95", "p95 ÷ alone"],
                [[name, p["b_requests"], p["b_ttft_p50_s"], p["b_ttft_p95_s"],
                  round(p["b_ttft_p95_s"] / base, 3)] for name, p in data["phases"].items()])
    print(f"\nweights 2:1, both backlogged: generated tokens {weights['tokens']}, "
          f"service ratio {weights['service_ratio']}")
    write_results("fairness", data)


if __name__ == "__main__":
    main()
