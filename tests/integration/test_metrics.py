"""The backend's own metrics appear on Triton's /metrics port and count what happened."""

from __future__ import annotations

from tests.integration.support import GrpcStream, metric, wait_until


def test_token_counters_and_latency_histograms_follow_a_request(served):
    before = {
        "prompt": metric(served, "llm_prompt_tokens_total", model="smollm2"),
        "generated": metric(served, "llm_generation_tokens_total", model="smollm2"),
        "ttft": metric(served, "llm_time_to_first_token_seconds_count"),
        "itl": metric(served, "llm_inter_token_latency_seconds_count"),
    }
    stream = GrpcStream(served)
    try:
        stream.submit("The capital of France is", {"max_tokens": 6, "ignore_eos": True})
        result = stream.wait(timeout=60)
    finally:
        stream.close()
    assert result.error is None
    assert metric(served, "llm_prompt_tokens_total") - before["prompt"] == result.num_input_tokens
    assert metric(served, "llm_generation_tokens_total") - before["generated"] == 6
    assert metric(served, "llm_time_to_first_token_seconds_count") - before["ttft"] == 1
    assert metric(served, "llm_inter_token_latency_seconds_count") - before["itl"] >= 1
    # The request gauges are published by the backend's queue ticker, every 50 ms at most.
    for name in ("llm_inflight_requests", "llm_waiting_requests"):
        for level in ("1", "2", "3"):
            assert wait_until(
                lambda n=name, lv=level: metric(served, n, priority=lv) == 0, 10), (name, level)
