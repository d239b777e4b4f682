"""Overhead of Triton + our backend vs the same vLLM engine called directly, in one run.

Output tokens/s at concurrency 1 and 8, same model, prompts and sampling settings, in steady state:
each phase keeps `concurrency` clients busy (each sends its next request when the last ends) for a
fixed time; phases of the direct engine and the Triton models alternate, several cycles, so machine
noise hits both alike. Triton runs the shipped configuration (three priority levels in the
backend's queue, one reserved urgent slot). A request stalled when its first token took longer
than STALL_S; the goal is none at either concurrency, and at least MIN_REQUESTS requests per path
and concurrency so that a rare stall shows.

A third path sends the same requests through Triton with a JSON Schema as structured output
(vLLM's structured-output backend masks every step's logits with the schema's grammar), so the
cost of structured outputs is measured beside the plain path, in the same run. Two more paths
measure LoRA: a variant of the model loaded with ``enable_lora`` and one adapter (random weights,
rank 16, on q/v projections) loaded at run time, called without the adapter and with it.

    make bench-overhead        (or: .venv/bin/python -m bench.overhead --cycles 3 --seconds 20)
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
import uuid
from typing import Any

from bench.common import (
    PROMPTS,
    Variant,
    load_variant,
    median,
    print_table,
    run_concurrently,
    shipped_engine_args,
    start_server,
    write_results,
)
from control_plane.demo_adapter import make_random_adapter
from control_plane.triton.adapter_control import TritonAdapterControl
from control_plane.triton.llm_client import GrpcStream
from control_plane.triton.runtime import CACHE_DIR

# Short generations, so that many requests start (where a stall would show) and per-request
# overhead weighs more than with long ones.
SAMPLING = {"max_tokens": 16, "ignore_eos": True, "temperature": 0}
MIN_REQUESTS = 200
# Between the first requests of the clients of a phase.
STAGGER_S = 0.1
# A request that waited this long for its first token was stalled (the no-load TTFT is ~30-60 ms).
STALL_S = 0.4
SHIPPED = Variant("smollm2", {}, {})
LORA = Variant("smollm2-lora", {}, {"enable_lora": True, "max_loras": 1, "max_lora_rank": 16})
ADAPTER = "bench-random"
# The key of the bench server's repository API, which adapter control requests carry.
BENCH_KEY = "bench-repository-key"
# A schema whose answer is longer than max_tokens: every generated token is constrained.
STRUCTURED = {**SAMPLING, "structured_outputs": {"json": {
    "type": "object", "properties": {"story": {"type": "string", "minLength": 400}},
    "required": ["story"]}}}


class DirectEngine:
    """The same vLLM engine, in this process, on a loop thread of its own."""

    def __init__(self, engine_args: dict[str, Any]) -> None:
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, daemon=True).start()

        async def build() -> Any:
            return AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_args))

        self.engine = asyncio.run_coroutine_threadsafe(build(), self._loop).result()

    def generate(self, prompt: str) -> tuple[int, float]:
        """(output tokens, time to first token) for one streamed generation."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        async def run() -> tuple[int, float]:
            params = SamplingParams(**SAMPLING, output_kind=RequestOutputKind.DELTA)
            started = time.monotonic()
            first: float | None = None
            tokens = 0
            async for output in self.engine.generate(prompt, params, uuid.uuid4().hex):
                if first is None and output.outputs[0].token_ids:
                    first = time.monotonic() - started
                tokens += len(output.outputs[0].token_ids)
            return tokens, first or 0.0

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result()

    def shutdown(self) -> None:
        self.engine.shutdown()
        self._loop.call_soon_threadsafe(self._loop.stop)


def _round(calls: list[Any]) -> tuple[int, float, list[float]]:
    started = time.monotonic()
    results = run_concurrently(calls)
    elapsed = time.monotonic() - started
    return sum(r[0] for r in results), elapsed, [r[1] for r in results]


def _steady(path: Any, concurrency: int, seconds: float, offset: int
            ) -> tuple[int, float, list[float]]:
    """Closed loop: ``concurrency`` clients, each sending its next request when one ends."""
    started = time.monotonic()
    stop_at = started + seconds

    def client(index: int) -> Any:
        def run() -> tuple[int, list[float]]:
            tokens, ttfts, n = 0, [], 0
            # Clients join one after another, as in steady traffic: eight arrivals in the same
            # instant are a burst (bench/burst.py), whose first step vLLM itself takes ~1 s over.
            time.sleep(index * STAGGER_S)
            while time.monotonic() < stop_at:
                produced, ttft = path(PROMPTS[(offset + index + n) % len(PROMPTS)], index)()
                tokens, n = tokens + produced, n + 1
                ttfts.append(ttft)
            return tokens, ttfts
        return run

    results = run_concurrently([client(i) for i in range(concurrency)])
    elapsed = time.monotonic() - started
    return sum(r[0] for r in results), elapsed, [t for r in results for t in r[1]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    args = parser.parse_args()

    server = start_server("overhead", repository_key=BENCH_KEY)
    direct: DirectEngine | None = None
    try:
        load_s = {variant.name: load_variant(server, variant) for variant in (SHIPPED, LORA)}
        adapter_dir = make_random_adapter(CACHE_DIR / "bench" / "adapters" / ADAPTER, rank=16,
                                          seed=1)
        TritonAdapterControl(server.grpc_url, BENCH_KEY).load(LORA.name, ADAPTER,
                                                              str(adapter_dir))
        direct = DirectEngine(shipped_engine_args())

        # One persistent gRPC stream per concurrent client, as a real client keeps its channel.
        pools = {model: [GrpcStream(server.grpc_url, model) for _ in range(8)]
                 for model in (SHIPPED.name, LORA.name)}

        def via_triton(model: str, prompt: str, index: int,
                       sampling: dict[str, Any] = SAMPLING) -> Any:
            def call() -> tuple[int, float]:
                stream = pools[model][index]
                stream.submit(prompt, sampling)
                result = stream.wait(600)
                if result.error or result.first_token_at is None:
                    raise RuntimeError(f"{model}: {result.error}")
                return result.num_output_tokens, result.first_token_at - result.submitted_at
            return call

        paths = {
            "direct": lambda prompt, index: (lambda: direct.generate(prompt)),
            "triton": lambda prompt, index: via_triton(SHIPPED.name, prompt, index),
            "structured": lambda prompt, index: via_triton(SHIPPED.name, prompt, index,
                                                           STRUCTURED),
            "lora_off": lambda prompt, index: via_triton(LORA.name, prompt, index),
            "lora_on": lambda prompt, index: via_triton(LORA.name, prompt, index,
                                                        {**SAMPLING, "lora_name": ADAPTER}),
        }
        for path in paths.values():  # warm-up, and every pooled stream connected
            _round([path(PROMPTS[0], i) for i in range(8)])

        totals = {(p, c): [0, 0.0, []] for p in paths for c in (1, 8)}
        for cycle in range(args.cycles):
            for concurrency in (1, 8):
                for name, path in paths.items():
                    _add(totals[(name, concurrency)],
                         *_steady(path, concurrency, args.seconds, offset=cycle))
        for pool in pools.values():
            for stream in pool:
                stream.close()
    finally:
        if direct is not None:
            direct.shutdown()
        server.stop()

    rows, data = [], {"cycles": args.cycles, "phase_seconds": args.seconds, "sampling": SAMPLING,
                      "load_seconds": load_s}
    for (name, concurrency), (tokens, elapsed, ttfts) in totals.items():
        rate = tokens / elapsed
        stalled = sum(t > STALL_S for t in ttfts)
        data[f"{name}_c{concurrency}"] = {
            "tokens_per_s": rate, "requests": len(ttfts), "ttft_p50_s": median(ttfts),
            "ttft_max_s": max(ttfts), "stalled_requests": stalled,
        }
        rows.append([name, concurrency, len(ttfts), rate, median(ttfts), max(ttfts), stalled])
    for concurrency in (1, 8):
        base = data[f"direct_c{concurrency}"]["tokens_per_s"]
        data[f"ratio_c{concurrency}"] = data[f"triton_c{concurrency}"]["tokens_per_s"] / base
        data[f"structured_ratio_c{concurrency}"] = (
            data[f"structured_c{concurrency}"]["tokens_per_s"]
            / data[f"triton_c{concurrency}"]["tokens_per_s"])
        data[f"lora_ratio_c{concurrency}"] = (data[f"lora_on_c{concurrency}"]["tokens_per_s"]
                                              / data[f"lora_off_c{concurrency}"]["tokens_per_s"])
        data[f"lora_engine_ratio_c{concurrency}"] = (
            data[f"lora_off_c{concurrency}"]["tokens_per_s"]
            / data[f"triton_c{concurrency}"]["tokens_per_s"])
    print_table("Output tokens/s: Triton + llm_vllm backend vs vLLM called directly",
                ["path", "conc", "requests", "tok/s", "ttft p50 s", "ttft max s",
                 f"ttft>{STALL_S}s"], rows)
    print(f"\nratio_c1 = {data['ratio_c1']:.3f}   ratio_c8 = {data['ratio_c8']:.3f}   "
          "(goal >= 0.97); "
          f"stalled: c1 {data['triton_c1']['stalled_requests']}, "
          f"c8 {data['triton_c8']['stalled_requests']} (goal 0)")
    print(f"structured outputs (JSON Schema) vs plain, through Triton: "
          f"c1 {data['structured_ratio_c1']:.3f}, c8 {data['structured_ratio_c8']:.3f} "
          "(measured, no goal)")
    print(f"LoRA adapter vs none, same enable_lora engine: c1 {data['lora_ratio_c1']:.3f}, "
          f"c8 {data['lora_ratio_c8']:.3f}; enable_lora engine without adapter vs shipped: "
          f"c1 {data['lora_engine_ratio_c1']:.3f}, c8 {data['lora_engine_ratio_c8']:.3f} "
          "(measured, no goal)")
    short = [key for key, value in data.items() if isinstance(value, dict)
             and value.get("requests", MIN_REQUESTS) < MIN_REQUESTS]
    if short:
        print(f"fewer than {MIN_REQUESTS} requests in {', '.join(short)}: run longer phases")
    write_results("overhead", data)


def _add(total: list[Any], tokens: int, elapsed: float, ttfts: list[float]) -> None:
    total[0] += tokens
    total[1] += elapsed
    total[2].extend(ttfts)


if __name__ == "__main__":
    main()
