"""The backend's own metrics, and the stock vLLM backend's vllm:* families, appear on Triton's
/metrics port and count what happened."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

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


# The stock vLLM backend's families (REPORT_CUSTOM_METRICS, on in the shipped config), fed by vLLM's
# own stats: (sample, what each request adds to it).
STOCK_DELTAS = {
    "vllm:prompt_tokens_total": "prompt",
    "vllm:generation_tokens_total": "generated",
    "vllm:request_prompt_tokens_sum": "prompt",
    "vllm:request_generation_tokens_sum": "generated",
    "vllm:request_params_max_tokens_sum": "generated",
    "vllm:request_success_total": "one",
    "vllm:request_prompt_tokens_count": "one",
    "vllm:e2e_request_latency_seconds_count": "one",
    "vllm:time_to_first_token_seconds_count": "one",
}


def stock_samples(server) -> list[tuple[str, dict[str, str]]]:
    with urllib.request.urlopen(server.metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    return [(sample.name, sample.labels) for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name.startswith("vllm:")]


def test_the_stock_vllm_families_count_what_vllm_reports(served):
    def read() -> dict[str, float]:
        values = {name: metric(served, name, model="smollm2", version="1")
                  for name in STOCK_DELTAS}
        values["length"] = metric(served, "vllm:request_success_total", model="smollm2",
                                  finished_reason="length")
        return values

    before = read()
    prompts = ["The capital of France is", "Write one word:", "Count to three: one,"]
    max_tokens = [3, 5, 7]
    results = []
    for prompt, tokens in zip(prompts, max_tokens, strict=True):
        stream = GrpcStream(served)
        try:
            stream.submit(prompt, {"max_tokens": tokens, "ignore_eos": True})
            results.append(stream.wait(timeout=60))
        finally:
            stream.close()
    assert [r.error for r in results] == [None] * 3
    assert [r.num_output_tokens for r in results] == max_tokens
    per_request = {"prompt": sum(r.num_input_tokens for r in results),
                   "generated": sum(max_tokens), "one": len(results)}
    expected = {name: per_request[kind] for name, kind in STOCK_DELTAS.items()}
    # ignore_eos with max_tokens: every request ends on its length.
    expected["length"] = len(results)

    def deltas() -> dict[str, float]:
        return {name: value - before[name] for name, value in read().items()}

    # vLLM's stats reach the logger after the responses, and its publisher thread after that.
    wait_until(lambda: deltas() == expected, timeout=20)
    assert deltas() == expected
    samples = stock_samples(served)
    names = {name for name, _ in samples}
    for family in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                   "vllm:kv_cache_usage_perc", "vllm:time_per_output_token_seconds_count",
                   "vllm:request_queue_time_seconds_count",
                   "vllm:request_inference_time_seconds_count", "vllm:request_params_n_count"):
        assert family in names
    # The stock backend's labels, and only the histogram and finish-reason ones besides.
    for name, labels in samples:
        assert {k: v for k, v in labels.items() if k not in ("le", "finished_reason")} == {
            "model": "smollm2", "version": "1"}, (name, labels)
    assert wait_until(lambda: metric(served, "vllm:num_requests_running", model="smollm2") == 0,
                      10)
