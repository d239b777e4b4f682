"""Fair share inside a priority level under a flood: tenant B's time to first token while tenant A
floods the same level, with the backend's fair share (tenants sent, as the gateway sends them)
and first come, first served (the same requests sent without tenants: one shared tenant, served
in arrival order), each divided by B's TTFT with the engine to itself.

One model (``max_num_seqs`` 2 by default: saturation is cheap on a CPU), all at level 3. B sends
one 8-token request every ``--interval`` seconds; A sends ``--flood-ratio`` times as many, open
loop, 48 tokens each, far more than the engine serves, so A's backlog grows all phase long (it
is cancelled at the end). A B request that has no token when the phase ends (+5 s) counts with
its wait so far (``b_censored``: its real TTFT is longer). Also the service (weighted tokens,
counted as they stream) of two backlogged tenants with weights 2:1, against VTC's bound.
Goal (issue 14): ``fair_ttft_p95_ratio`` ≤ 1.5.

Fair share runs twice: with preemption (the default: B, with nothing running, takes a slot from
A, whose request resumes later) and without it (B goes first in the queue but waits for one of
A's generations to end). Every A request that completes must have all its 48 tokens.

    make bench-fairness        (or: .venv/bin/python -m bench.fairness --seconds 30)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import threading
import time
import urllib.request
from typing import Any, Self

import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families

from bench.common import Variant, load_variant, print_table, start_server, write_results
from control_plane.triton.llm_client import GrpcStream, StreamResult, record_response, stock_inputs
from control_plane.triton.server import TritonServer
from llm_backend.fair_share import INPUT_WEIGHT, OUTPUT_WEIGHT
from llm_backend.gateway_trust import GATEWAY_SECRET_ENV

MODEL = "smollm2_fair"
NO_PREEMPTION = "smollm2_fair_nopreempt"
PROMPT = "Write one sentence about the sea:"
A_SAMPLING = {"max_tokens": 48, "ignore_eos": True, "temperature": 0}
B_SAMPLING = {"max_tokens": 8, "ignore_eos": True, "temperature": 0}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def one(server: TritonServer, sampling: dict[str, Any], parameters: dict[str, Any] | None,
        model: str = MODEL) -> tuple[float, int]:
    """(TTFT seconds, output tokens) of one streamed request."""
    stream = GrpcStream(server.grpc_url, model)
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


def preemptions(server: TritonServer, model: str) -> int:
    with urllib.request.urlopen(server.metrics_url, timeout=5) as response:
        text = response.read().decode()
    return int(sum(sample.value for family in text_string_to_metric_families(text)
                   for sample in family.samples
                   if sample.name == "llm_tenant_preemptions_total"
                   and sample.labels.get("model") == model))


class Flood:
    """Tenant A, open loop: a new request every ``1 / rate`` seconds on one gRPC stream, however
    many are still waiting; the backlog is cancelled when the phase ends."""

    def __init__(self, server: TritonServer, model: str, rate: float,
                 parameters: dict[str, Any] | None) -> None:
        self.results: dict[str, StreamResult] = {}
        self._lock = threading.Lock()
        self._client = grpcclient.InferenceServerClient(server.grpc_url)
        self._client.start_stream(callback=self._on_response)
        self._model, self._rate, self._parameters = model, rate, parameters
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._send, daemon=True)

    def _on_response(self, result: Any, error: Any) -> None:
        if error is not None:
            return  # the cancelled backlog at the end
        with self._lock:
            recorded = self.results.get(result.get_response().id)
            if recorded is not None:
                record_response(recorded, result, None)

    def _send(self) -> None:
        index = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            request_id = f"a{index}"
            with self._lock:
                self.results[request_id] = StreamResult(submitted_at=time.monotonic())
            self._client.async_stream_infer(
                self._model, stock_inputs(PROMPT, A_SAMPLING), request_id=request_id,
                enable_empty_final_response=True, parameters=self._parameters)
            index += 1
            next_at += 1 / self._rate
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._client.stop_stream(cancel_requests=True)
        self._client.close()

    def summary(self, seconds: float) -> dict[str, float]:
        with self._lock:
            done = [r for r in self.results.values() if r.final]
            generated = sum(r.num_output_tokens for r in self.results.values())
            return {"a_requests_sent": len(self.results), "a_requests_done": len(done),
                    "a_done_short_of_max_tokens": sum(
                        r.num_output_tokens != A_SAMPLING["max_tokens"] for r in done),
                    "a_tokens_per_s": round(generated / seconds, 2)}


def phase(server: TritonServer, seconds: float, interval: float, flood_rate: float, secret: str,
          with_tenants: bool, model: str = MODEL) -> dict[str, Any]:
    """B's requests, one every ``interval`` seconds, each waiting at most until the phase ends
    (and 5 s more): one that has no token by then counts with its wait so far (``censored``)."""
    preempted_before = preemptions(server, model)
    flood = (Flood(server, model, flood_rate, tenant("A" if with_tenants else None, secret))
             if flood_rate else None)
    ttfts: list[float] = []
    censored = 0
    flood_started = time.monotonic()
    with flood or contextlib.nullcontext():
        if flood:
            time.sleep(3.0)  # the flood's backlog builds first
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.monotonic()
            stream = GrpcStream(server.grpc_url, model)
            try:
                stream.submit(PROMPT, B_SAMPLING,
                              parameters=tenant("B" if with_tenants else None, secret))
                result = stream.wait(max(1.0, deadline + 5 - time.monotonic()))
                first_token_at, error = result.first_token_at, result.error
                waited = time.monotonic() - result.submitted_at
            finally:
                stream.close(cancel=stream.result.done_at is None)
            if error:
                raise RuntimeError(f"B's request failed: {error}")
            if first_token_at is None:
                censored += 1
                ttfts.append(waited)
            else:
                ttfts.append(first_token_at - result.submitted_at)
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
    summary = flood.summary(time.monotonic() - flood_started) if flood else {}
    return {"b_requests": len(ttfts), "b_censored": censored,
            "b_ttft_p50_s": round(percentile(ttfts, 0.5), 3),
            "b_ttft_p95_s": round(percentile(ttfts, 0.95), 3), **summary,
            "preemptions": preemptions(server, model) - preempted_before}


def weighted(server: TritonServer, seconds: float, secret: str, max_num_seqs: int
             ) -> dict[str, Any]:
    """Two tenants, both backlogged (4 closed-loop streams each), weights 2:1: the service each
    received over ``seconds``, counted as it streams, against VTC's bound."""
    weights = {"heavy": 2.0, "light": 1.0}
    stop = threading.Event()
    lock = threading.Lock()
    done = {name: {"requests": 0, "prompt": 0, "generated": 0} for name in weights}
    live: dict[str, set[GrpcStream]] = {name: set() for name in weights}

    def client(name: str) -> None:
        while not stop.is_set():
            stream = GrpcStream(server.grpc_url, MODEL)
            with lock:
                live[name].add(stream)
            try:
                stream.submit(PROMPT, A_SAMPLING, parameters=tenant(name, secret, weights[name]))
                result = stream.wait(600)
            finally:
                stream.close(cancel=stream.result.done_at is None)
            with lock:
                live[name].discard(stream)
                done[name]["requests"] += 1
                done[name]["prompt"] += result.num_input_tokens or 0
                done[name]["generated"] += result.num_output_tokens

    def service() -> dict[str, float]:
        """Weighted tokens served so far per tenant (a started request's prompt counts)."""
        with lock:
            out = {}
            for name in weights:
                prompt = done[name]["prompt"] + sum(s.result.num_input_tokens or 0
                                                    for s in live[name])
                generated = done[name]["generated"] + sum(s.result.num_output_tokens
                                                          for s in live[name])
                out[name] = INPUT_WEIGHT * prompt + OUTPUT_WEIGHT * generated
            return out

    threads = [threading.Thread(target=client, args=(name,), daemon=True)
               for name in weights for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(3.0)  # both backlogs build first
    start = service()
    time.sleep(seconds)
    end = service()
    stop.set()
    for thread in threads:
        thread.join(timeout=600)
    served = {name: round(end[name] - start[name], 1) for name in weights}
    per_weight = {name: served[name] / weights[name] for name in weights}
    # Sheng et al.'s bound for two backlogged clients: their weighted services differ by at most
    # 2 (w_p L_input + w_q M), M the tokens a running batch holds (here max_num_seqs requests of
    # max_tokens each), over the smaller weight.
    prompt_len = max(done[name]["prompt"] / max(1, done[name]["requests"]) for name in weights)
    bound = 2 * (INPUT_WEIGHT * prompt_len + OUTPUT_WEIGHT * max_num_seqs
                 * A_SAMPLING["max_tokens"]) / min(weights.values())
    gap = abs(per_weight["heavy"] - per_weight["light"])
    ratio = served["heavy"] / served["light"] if served["light"] else None
    return {"weighted_tokens": served, "service_ratio": None if ratio is None else round(ratio, 3),
            "service_per_weight_gap": round(gap, 1), "vtc_bound": round(bound, 1),
            "within_vtc_bound": gap <= bound}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--flood-ratio", type=float, default=10.0,
                        help="A's request rate over B's")
    parser.add_argument("--max-num-seqs", type=int, default=2)
    # vLLM's CPU default is 128-token blocks: a paused request of ~60 tokens then has no full
    # block in the prefix cache, and resuming recomputes all of it (~0.5 s a prefill step here).
    parser.add_argument("--block-size", type=int, default=32,
                        help="vLLM KV block size for every variant (CPU default: 128)")
    args = parser.parse_args()
    secret = secrets.token_urlsafe(16)
    os.environ[GATEWAY_SECRET_ENV] = secret  # tritonserver's environment: the node trusts it
    server = start_server("fairness")
    try:
        for name, preempting in ((MODEL, "true"), (NO_PREEMPTION, "false")):
            load_variant(server, Variant(name, {"reserved_urgent_slots": "0",
                                                "fair_share_preemption": preempting},
                                         {"max_num_seqs": args.max_num_seqs,
                                          "block_size": args.block_size}))
            one(server, B_SAMPLING, None, name)  # warm-up
        alone = phase(server, args.seconds, args.interval, 0, secret, True)
        flood_rate = args.flood_ratio / args.interval
        fair = phase(server, args.seconds, args.interval, flood_rate, secret, True)
        fair_no_preemption = phase(server, args.seconds, args.interval, flood_rate, secret, True,
                                   NO_PREEMPTION)
        fifo = phase(server, args.seconds, args.interval, flood_rate, secret, False)
        weights = weighted(server, args.seconds, secret, args.max_num_seqs)
    finally:
        server.stop()
    base = alone["b_ttft_p95_s"]
    phases = {"alone": alone, "fair": fair, "fair_no_preemption": fair_no_preemption,
              "fifo": fifo}
    data = {"max_num_seqs": args.max_num_seqs, "block_size": args.block_size,
            "a_requests_per_s": flood_rate,
            "b_interval_s": args.interval, "phases": phases,
            "fair_ttft_p95_ratio": round(fair["b_ttft_p95_s"] / base, 3),
            "fair_no_preemption_ttft_p95_ratio": round(fair_no_preemption["b_ttft_p95_s"] / base,
                                                       3),
            "fifo_ttft_p95_ratio": round(fifo["b_ttft_p95_s"] / base, 3),
            "goal_fair_ttft_p95_ratio": 1.5,
            "weighted_2_to_1": weights}
    data["goal_met"] = data["fair_ttft_p95_ratio"] <= 1.5
    print_table("tenant B's time to first token (s) at level 3",
                ["phase", "B requests", "B censored", "p50", "p95", "p95 ÷ alone", "A sent",
                 "A done", "A done short", "A tokens/s", "preemptions"],
                [[name, p["b_requests"], p["b_censored"], p["b_ttft_p50_s"], p["b_ttft_p95_s"],
                  round(p["b_ttft_p95_s"] / base, 3), p.get("a_requests_sent", 0),
                  p.get("a_requests_done", 0), p.get("a_done_short_of_max_tokens", 0),
                  p.get("a_tokens_per_s", 0), p["preemptions"]]
                 for name, p in phases.items()])
    print(f"\nweights 2:1, both backlogged: weighted tokens served {weights['weighted_tokens']}, "
          f"ratio {weights['service_ratio']}; per-weight gap {weights['service_per_weight_gap']} "
          f"(VTC bound {weights['vtc_bound']}: "
          f"{'within' if weights['within_vtc_bound'] else 'outside'})")
    write_results("fairness", data)


if __name__ == "__main__":
    main()
