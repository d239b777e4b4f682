"""One reading of a node's ``/metrics``, kept small: only the series the statistics use."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

# prometheus_client's parser names every counter sample ``*_total``, Triton's included.
REQUEST_SUCCESS = "nv_inference_request_success_total"
REQUEST_FAILURE = "nv_inference_request_failure_total"
PROMPT_TOKENS = "llm_prompt_tokens_total"
GENERATED_TOKENS = "llm_generation_tokens_total"
TTFT = "llm_time_to_first_token_seconds_bucket"
ITL = "llm_inter_token_latency_seconds_bucket"
QUEUE_TIME = "vllm:request_queue_time_seconds_bucket"
FINISHED = "vllm:request_success_total"
WAITING = "llm_waiting_requests"
RUNNING = "llm_inflight_requests"
KEPT = frozenset({REQUEST_SUCCESS, REQUEST_FAILURE, PROMPT_TOKENS, GENERATED_TOKENS, TTFT, ITL,
                  QUEUE_TIME, FINISHED, WAITING, RUNNING})

# (series name, its labels but model and version as sorted pairs) -> value
Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass(frozen=True)
class NodeReading:
    """Every kept series of one scrape, by the Triton model it belongs to."""

    taken_at: float
    by_model: dict[str, Series]


def parse_reading(text: str, taken_at: float) -> NodeReading:
    """Keep the statistics' series, summed over versions of one Triton model."""
    by_model: dict[str, Series] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name not in KEPT or "model" not in sample.labels:
                continue
            rest = tuple(sorted((k, v) for k, v in sample.labels.items()
                                if k not in ("model", "version")))
            series = by_model.setdefault(sample.labels["model"], {})
            key = (sample.name, rest)
            series[key] = series.get(key, 0.0) + sample.value
    return NodeReading(taken_at, by_model)
