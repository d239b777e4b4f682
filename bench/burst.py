"""A burst of N concurrent streams through Triton + our backend vs the same vLLM engine called
directly, in one run.

For each burst size N and generation length T, N streaming requests are sent at once, half over
HTTP ``generate_stream`` (SSE) and half over gRPC streaming, and each one must end with its tokens
or a clear error. A request with no final answer within ``--deadline-s`` counts as hung and is
cancelled. While a Triton burst runs, a short urgent (level 1) request goes out every second, so
the table also shows what the reserved engine slot does for an urgent request's time to first
token. The same N requests (same prompts and sampling) then go, all at once, to an in-process vLLM
engine built from the same model.json. The two paths alternate from one (N, T) to the next, so
machine noise hits both alike, and the engine drains between phases.

Our backend gives vLLM at most max_num_seqs requests at a time, with one slot kept for level 1.
The rest wait in its priority queue, which turns away requests beyond the level's max_queue_size or
its timeout. Those refusals are answers, not hangs. When Triton refuses some requests, the two
wall times cover different amounts of work, so also compare tokens/s (``throughput_ratio``).

    make bench-burst        (or: .venv/bin/python -m bench.burst --sizes 50,200,500 --tokens 16,128)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import httpx
import tritonclient.grpc.aio as grpcaio
from prometheus_client.parser import text_string_to_metric_families

from bench.common import (
    MODEL_DIR,
    PROMPTS,
    Variant,
    load_variant,
    median,
    percentile,
    print_table,
    shipped_engine_args,
    start_server,
    write_results,
)
from bench.overhead import DirectEngine
from control_plane.triton.async_llm_client import grpc_stream, http_stream
from control_plane.triton.llm_client import StreamResult
from control_plane.triton.model_config import read_model_json, read_pbtxt
from control_plane.triton.server import TritonServer

SHIPPED = Variant("smollm2", {}, {})
URGENT = {"priority": 1, "max_tokens": 8, "temperature": 0}
# The urgent requests start once requests wait in the backend's queue, or this long after the
# burst began, and then go out one per URGENT_SPACING_S while the burst lasts.
URGENT_AFTER_S = 1.0
URGENT_SPACING_S = 1.0
DRAIN_TIMEOUT_S = 120.0
INFLIGHT, WAITING = "llm_inflight_requests", "llm_waiting_requests"
ANSWERED, REFUSED, FAILED, HUNG = "answered", "refused", "failed", "hung"
HTTP, GRPC, DIRECT = "http", "grpc", "direct"


def sampling(tokens: int) -> dict[str, Any]:
    return {"max_tokens": tokens, "ignore_eos": True, "temperature": 0}


@dataclass
class Outcome:
    """How one request ended. It stays HUNG until it gets a final answer."""

    protocol: str
    state: str = HUNG
    tokens: int = 0
    ttft_s: float | None = None  # from sending this request
    done_s: float | None = None  # from the start of the burst
    error: str | None = None

    def add_tokens(self, count: int, sent_at: float) -> None:
        if count and self.ttft_s is None:
            self.ttft_s = time.monotonic() - sent_at
        self.tokens += count

    def finish(self) -> None:
        """The stream ended without an error; an answer has tokens (max_tokens >= 1, ignore_eos)."""
        if self.tokens:
            self.state = ANSWERED
        else:
            self.state, self.error = FAILED, "the stream ended with no tokens and no error"


async def _bounded(call: Callable[[Outcome], Awaitable[None]], outcome: Outcome, deadline_s: float,
                   burst_start: float) -> Outcome:
    try:
        async with asyncio.timeout(deadline_s):
            await call(outcome)
    except TimeoutError:
        # Leaving the timeout cancelled the call: its stream is closed, so the server aborts it.
        outcome.state, outcome.error = HUNG, f"no final answer within {deadline_s:.0f} s"
    outcome.done_s = time.monotonic() - burst_start
    return outcome


async def stream(call: Callable[[], Awaitable[StreamResult]], outcome: Outcome) -> None:
    """One request through the project's asyncio clients (HTTP SSE or gRPC), as an Outcome."""
    try:
        result = await call()
    except (httpx.HTTPError, grpc.RpcError) as error:
        outcome.state, outcome.error = FAILED, f"{type(error).__name__}: {error}"
        return
    outcome.tokens = result.num_output_tokens
    if result.first_token_at is not None:
        outcome.ttft_s = result.first_token_at - result.submitted_at
    if result.error is not None:
        outcome.state, outcome.error = REFUSED, result.error
    elif result.final:
        outcome.finish()


def backend_gauges(text: str) -> dict[str, float]:
    """The backend's in-flight and waiting request gauges for the model, summed over levels."""
    totals = {INFLIGHT: 0.0, WAITING: 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in totals and sample.labels.get("model") == SHIPPED.name:
                totals[sample.name] += sample.value
    return totals


async def urgent_requests(client: httpx.AsyncClient, metrics_url: str, burst_done: asyncio.Event,
                          limit: int, deadline_s: float) -> list[Outcome]:
    """Once the burst is queued, one urgent request per second until the burst ends, at most
    ``limit``. None of them waits for the one before it."""
    started = time.monotonic()
    while not burst_done.is_set() and time.monotonic() - started < URGENT_AFTER_S:
        try:
            if backend_gauges((await client.get(metrics_url)).text)[WAITING] > 0:
                break
        except httpx.HTTPError:
            pass  # the metrics port is busy or slow; the timer starts the urgent requests instead
        await asyncio.sleep(0.1)
    tasks: list[asyncio.Task[Outcome]] = []
    while not burst_done.is_set() and len(tasks) < limit:
        call = functools.partial(stream, functools.partial(
            http_stream, client, SHIPPED.name, PROMPTS[len(tasks) % len(PROMPTS)], URGENT))
        tasks.append(asyncio.create_task(
            _bounded(call, Outcome(HTTP), deadline_s, time.monotonic())))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(burst_done.wait(), URGENT_SPACING_S)
    return list(await asyncio.gather(*tasks))


async def triton_burst(server: TritonServer, prompts: list[str], params: dict[str, Any],
                       deadline_s: float, urgent_limit: int,
                       ) -> tuple[list[Outcome], float, list[Outcome]]:
    """All requests at once, even ones over HTTP and odd ones over gRPC, plus the urgent ones.
    Returns (outcomes, the burst's wall time, urgent outcomes)."""
    connections = len(prompts) + urgent_limit + 4
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    timeout = httpx.Timeout(deadline_s, connect=30)
    async with (
        httpx.AsyncClient(base_url=f"http://{server.http_url}", limits=limits, timeout=timeout,
                          trust_env=False) as http,
        grpcaio.InferenceServerClient(server.grpc_url) as grpc_client,
    ):
        calls: list[Callable[[Outcome], Awaitable[None]]] = [
            functools.partial(stream, functools.partial(
                http_stream if index % 2 == 0 else grpc_stream,
                http if index % 2 == 0 else grpc_client, SHIPPED.name, prompt, params))
            for index, prompt in enumerate(prompts)
        ]
        burst_done = asyncio.Event()
        started = time.monotonic()
        tasks = [asyncio.create_task(_bounded(call, Outcome(HTTP if i % 2 == 0 else GRPC),
                                              deadline_s, started))
                 for i, call in enumerate(calls)]
        urgent = asyncio.create_task(
            urgent_requests(http, server.metrics_url, burst_done, urgent_limit, deadline_s))
        outcomes = list(await asyncio.gather(*tasks))
        wall_s = time.monotonic() - started
        burst_done.set()
        return outcomes, wall_s, await urgent


async def direct_burst(engine: Any, prompts: list[str], params: dict[str, Any],
                       deadline_s: float) -> tuple[list[Outcome], float]:
    """All requests at once to the in-process engine. Runs on the engine's own loop."""
    from vllm import SamplingParams
    from vllm.exceptions import VLLMError
    from vllm.sampling_params import RequestOutputKind

    async def generate(prompt: str, outcome: Outcome) -> None:
        sent_at = time.monotonic()
        request = SamplingParams(**params, output_kind=RequestOutputKind.DELTA)
        try:
            async for output in engine.generate(prompt, request, uuid.uuid4().hex):
                outcome.add_tokens(len(output.outputs[0].token_ids), sent_at)
        except (VLLMError, ValueError) as error:  # the engine refusing it: an answer, too
            outcome.state, outcome.error = REFUSED, f"{type(error).__name__}: {error}"
            return
        outcome.finish()

    started = time.monotonic()
    outcomes = await asyncio.gather(*(
        _bounded(functools.partial(generate, prompt), Outcome(DIRECT), deadline_s, started)
        for prompt in prompts))
    return list(outcomes), time.monotonic() - started


def run_direct(direct: DirectEngine, prompts: list[str], params: dict[str, Any],
               deadline_s: float) -> tuple[list[Outcome], float]:
    future = asyncio.run_coroutine_threadsafe(
        direct_burst(direct.engine, prompts, params, deadline_s), direct._loop)
    return future.result(timeout=deadline_s + 60)


def wait_drained(server: TritonServer, timeout_s: float = DRAIN_TIMEOUT_S) -> bool:
    """Until the backend has no request in flight or waiting. False if that time runs out."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(trust_env=False, timeout=5) as client:
        while time.monotonic() < deadline:
            try:
                if sum(backend_gauges(client.get(server.metrics_url).text).values()) == 0:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
    return False


def _stat(values: list[float], fraction: float | None = None) -> float | None:
    """A percentile, the median, or None when there are no values (JSON has no NaN)."""
    if not values:
        return None
    return median(values) if fraction is None else percentile(values, fraction)


def summarize(outcomes: list[Outcome], wall_s: float) -> dict[str, Any]:
    states = Counter(o.state for o in outcomes)
    answered = [o for o in outcomes if o.state == ANSWERED]
    ttfts = [o.ttft_s for o in answered if o.ttft_s is not None]
    done = [o.done_s for o in answered if o.done_s is not None]
    tokens = sum(o.tokens for o in answered)
    return {
        "requests": len(outcomes), "answered": states[ANSWERED], "refused": states[REFUSED],
        "failed": states[FAILED], "hung_requests": states[HUNG], "wall_s": wall_s,
        "output_tokens": tokens, "tokens_per_s": tokens / wall_s if wall_s else None,
        "ttft_p50_s": _stat(ttfts), "ttft_p95_s": _stat(ttfts, 0.95),
        "ttft_max_s": _stat(ttfts, 1.0), "completion_p50_s": _stat(done),
        "completion_max_s": _stat(done, 1.0),
        "errors": dict(Counter(o.error for o in outcomes if o.error).most_common()),
        "ttfts_s": [round(t, 4) for t in ttfts], "completions_s": [round(t, 4) for t in done],
    }


def summarize_triton(outcomes: list[Outcome], wall_s: float,
                     urgent: list[Outcome]) -> dict[str, Any]:
    data = summarize(outcomes, wall_s)
    for protocol in (HTTP, GRPC):
        counts = Counter(o.state for o in outcomes if o.protocol == protocol)
        data[protocol] = {state: counts[state] for state in (ANSWERED, REFUSED, FAILED, HUNG)}
    urgent_ttfts = [o.ttft_s for o in urgent if o.state == ANSWERED and o.ttft_s is not None]
    data["urgent"] = {
        "sent": len(urgent), "answered": sum(o.state == ANSWERED for o in urgent),
        "ttft_p50_s": _stat(urgent_ttfts), "ttft_max_s": _stat(urgent_ttfts, 1.0),
        "ttfts_s": [round(t, 4) for t in urgent_ttfts],
        "errors": dict(Counter(o.error for o in urgent if o.error).most_common()),
    }
    return data


def shipped_settings() -> dict[str, Any]:
    config = read_pbtxt(MODEL_DIR / "config.pbtxt")
    return {"max_num_seqs": read_model_json(MODEL_DIR).get("max_num_seqs"),
            "parameters": {key: value.string_value for key, value in config.parameters.items()}}


def shared_slots() -> int:
    """Engine slots level 3 may use through Triton: max_num_seqs less the reserved ones."""
    config = read_pbtxt(MODEL_DIR / "config.pbtxt")
    reserved = int(config.parameters["reserved_urgent_slots"].string_value or 1)
    return int(read_model_json(MODEL_DIR)["max_num_seqs"]) - reserved


def _csv_ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=_csv_ints, default=[50, 200, 500],
                        help="burst sizes, comma-separated")
    parser.add_argument("--tokens", type=_csv_ints, default=[16, 128],
                        help="generation lengths (max_tokens), comma-separated")
    parser.add_argument("--deadline-s", type=float, default=900.0,
                        help="a request with no final answer by then is hung (and cancelled)")
    parser.add_argument("--urgent", type=int, default=10,
                        help="most urgent requests sent during each Triton burst")
    parser.add_argument("--shared-slots-baseline", action="store_true",
                        help="also run the engine directly with max_num_seqs = the slots level 3 "
                             "may use through Triton (max_num_seqs - reserved_urgent_slots), to "
                             "tell the reserved slot's cost from the request path's")
    parser.add_argument("--results-name", default="burst",
                        help="bench/results/<name>.json (a partial run keeps the full one)")
    args = parser.parse_args()

    server = start_server("burst")
    # One loop for every Triton burst: grpc.aio ties its machinery to the loop it first runs on.
    loop = asyncio.new_event_loop()
    direct: DirectEngine | None = None
    shared: DirectEngine | None = None
    bursts: dict[str, dict[str, Any]] = {}
    try:
        load_s = load_variant(server, SHIPPED)
        direct = DirectEngine(shipped_engine_args())
        if args.shared_slots_baseline:
            shared = DirectEngine({**shipped_engine_args(), "max_num_seqs": shared_slots()})
        warm_prompts, warm = PROMPTS[:4], sampling(8)
        warm_triton = loop.run_until_complete(triton_burst(server, warm_prompts, warm, 120, 0))
        warm_outcomes = warm_triton[0] + run_direct(direct, warm_prompts, warm, 120)[0]
        if not all(o.state == ANSWERED for o in warm_outcomes):
            raise RuntimeError(f"warm-up requests did not all answer: "
                               f"{[(o.protocol, o.state, o.error) for o in warm_outcomes]}")

        phases = [(n, t) for n in args.sizes for t in args.tokens]
        for index, (n, tokens) in enumerate(phases):
            prompts = [PROMPTS[i % len(PROMPTS)] for i in range(n)]
            params = sampling(tokens)
            burst: dict[str, Any] = {"n": n, "tokens": tokens, "drained": True}
            order = ["triton", "direct", *(["direct_shared_slots"] if shared else [])]
            for path in (order if index % 2 == 0 else order[::-1]):
                print(f"burst n={n} tokens={tokens}: {path}", flush=True)
                if path.startswith("direct"):
                    engine = direct if path == "direct" else shared
                    burst[path] = summarize(*run_direct(engine, prompts, params, args.deadline_s))
                    continue
                burst["triton"] = summarize_triton(*loop.run_until_complete(
                    triton_burst(server, prompts, params, args.deadline_s, args.urgent)))
                if not wait_drained(server):
                    burst["drained"] = False
                    break
            bursts[f"n{n}_t{tokens}"] = burst
            if not burst["drained"]:
                print(f"the backend still had requests in flight or waiting "
                      f"{DRAIN_TIMEOUT_S:.0f} s after the n={n} tokens={tokens} burst; "
                      "stopping here", flush=True)
                break
    finally:
        for engine in (direct, shared):
            if engine is not None:
                engine.shutdown()
        loop.close()
        server.stop()

    report(bursts)
    write_results(args.results_name, {
        "sizes": args.sizes, "tokens": args.tokens, "deadline_s": args.deadline_s,
        "urgent": URGENT, "urgent_limit": args.urgent, "load_seconds": load_s,
        "shipped": shipped_settings(), "bursts": bursts,
        "shared_slots_baseline": shared_slots() if args.shared_slots_baseline else None,
    })


def report(bursts: dict[str, dict[str, Any]]) -> None:
    """Add each burst's ratios and hung count, and print the table."""
    rows = []
    for burst in bursts.values():
        triton, base = burst.get("triton"), burst.get("direct")
        # The claim under test is about Triton + our backend. The direct engine queues without
        # limit, so a direct request "hangs" only when the whole burst outlasts the deadline.
        burst["hung_requests"] = triton["hung_requests"] if triton else None
        if triton and base:
            burst["burst_time_ratio"] = triton["wall_s"] / base["wall_s"]
            burst["throughput_ratio"] = (triton["tokens_per_s"] / base["tokens_per_s"]
                                         if base["tokens_per_s"] else None)
        same_slots = burst.get("direct_shared_slots")
        if triton and same_slots:
            burst["burst_time_ratio_vs_shared_slots"] = triton["wall_s"] / same_slots["wall_s"]
        for name, path in (("triton", triton), ("direct", base),
                           ("direct, shared slots", same_slots)):
            if path is None:
                continue
            urgent = path.get("urgent", {})
            rows.append([burst["n"], burst["tokens"], name, path["answered"], path["refused"],
                         path["failed"], path["hung_requests"], path["wall_s"],
                         _cell(path["tokens_per_s"]), _cell(path["ttft_p50_s"]),
                         _cell(path["ttft_p95_s"]),
                         f"{_cell(urgent.get('ttft_p50_s'))}/{_cell(urgent.get('ttft_max_s'))}"
                         if urgent else "-"])
    print_table("Burst of N concurrent streams: Triton + llm_vllm backend (half HTTP, half gRPC) "
                "vs vLLM called directly",
                ["N", "tokens", "path", "answered", "refused", "failed", "hung", "wall s", "tok/s",
                 "ttft p50 s", "ttft p95 s", "urgent ttft p50/max s"], rows)
    for key, burst in bursts.items():
        refusals = burst.get("triton", {}).get("errors", {})
        print(f"{key}: burst_time_ratio = {_cell(burst.get('burst_time_ratio'))}   "
              f"vs shared slots = {_cell(burst.get('burst_time_ratio_vs_shared_slots'))}   "
              f"throughput_ratio = {_cell(burst.get('throughput_ratio'))}   "
              f"hung_requests = {burst['hung_requests']}"
              + "".join(f"\n    {count} x {message[:160]}" for message, count in refusals.items()))


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    main()
