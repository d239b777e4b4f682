"""Triton's dynamic-batcher stall: the shipped configuration against Triton's own priority levels.

A toy decoupled model (bench/toy_repository, ~20 ms of work per request, no vLLM) with the LLM
model's Triton-facing configuration, in three variants: as shipped (``dynamic_batching {}``, the
levels enforced by the backend's own queue), with the priority levels and queue policy in Triton's
``dynamic_batching`` (the configuration before issue 10, which turns payload prefetching off), and
with no dynamic batching at all. Rounds of 4 concurrent requests; a round stalled when any request
took longer than STALL_S (Triton's batcher waits 500 ms).

    make bench-stall       (or: .venv/bin/python -m bench.batcher_stall --rounds 100)
"""

from __future__ import annotations

import argparse
import queue
import time
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from bench.common import median, print_table, run_concurrently, write_results
from control_plane.triton.model_config import read_pbtxt, to_load_json
from control_plane.triton.runtime import CACHE_DIR, PROJECT_ROOT
from control_plane.triton.server import TritonServer

TOY = PROJECT_ROOT / "bench" / "toy_repository" / "toy_stream"
STALL_S = 0.3
CONCURRENCY = 4


def load(server: TritonServer, name: str, batching: str) -> None:
    config = read_pbtxt(TOY / "config.pbtxt")
    config.name = name
    if batching == "triton_levels":
        levels = config.dynamic_batching
        levels.priority_levels = 3
        levels.default_priority_level = 3
        policy = levels.default_queue_policy
        policy.timeout_action = policy.REJECT
        policy.default_timeout_microseconds = 120_000_000
        policy.allow_timeout_override = True
        policy.max_queue_size = 256
    elif batching == "none":
        config.ClearField("dynamic_batching")
    with httpclient.InferenceServerClient(server.http_url) as client:
        client.load_model(name, config=to_load_json(config),
                          files={"file:1/model.py": (TOY / "1" / "model.py").read_bytes()})


class ToyStream:
    def __init__(self, url: str, model: str) -> None:
        self.model = model
        self.client = grpcclient.InferenceServerClient(url)
        self.events: queue.Queue[Any] = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.events.put(error or result))

    def request(self) -> float:
        text = grpcclient.InferInput("text_input", [1], "BYTES")
        text.set_data_from_numpy(np.array([b"x"], dtype=np.object_))
        started = time.monotonic()
        self.client.async_stream_infer(self.model, [text])
        event = self.events.get(timeout=30)
        if isinstance(event, Exception):
            raise event
        return time.monotonic() - started

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()

    variants = {
        "shipped: dynamic_batching {}, levels in the backend": ("toy_shipped", "shipped"),
        "priority levels in Triton's dynamic_batching": ("toy_triton_levels", "triton_levels"),
        "no dynamic batching": ("toy_no_batching", "none"),
    }
    server = TritonServer(PROJECT_ROOT / "bench" / "toy_repository",
                          log_path=CACHE_DIR / "logs" / "bench-stall-tritonserver.log")
    server.start()
    results: dict[str, dict[str, Any]] = {}
    try:
        for name, batching in variants.values():
            load(server, name, batching)
        streams = {name: [ToyStream(server.grpc_url, name) for _ in range(CONCURRENCY)]
                   for name, _ in variants.values()}
        stalled = {label: 0 for label in variants}
        latencies: dict[str, list[float]] = {label: [] for label in variants}
        for _ in range(args.rounds):
            for label, (name, _) in variants.items():
                round_latencies = run_concurrently([s.request for s in streams[name]])
                latencies[label].extend(round_latencies)
                stalled[label] += max(round_latencies) > STALL_S
                time.sleep(0.05)
        for pool in streams.values():
            for stream in pool:
                stream.close()
    finally:
        server.stop()

    for label in variants:
        values = latencies[label]
        results[label] = {"rounds": args.rounds, "stalled_rounds": stalled[label],
                          "latency_p50_s": median(values), "latency_max_s": max(values)}
    print_table(f"Rounds of {CONCURRENCY} concurrent requests to a toy decoupled model; "
                f"stalled = a request over {STALL_S} s",
                ["variant", "rounds", "stalled", "p50 s", "max s"],
                [[label, r["rounds"], r["stalled_rounds"], r["latency_p50_s"], r["latency_max_s"]]
                 for label, r in results.items()])
    write_results("batcher_stall", {"concurrency": CONCURRENCY, "stall_threshold_s": STALL_S,
                                    "variants": results})


if __name__ == "__main__":
    main()
