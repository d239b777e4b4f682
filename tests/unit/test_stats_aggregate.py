"""Serving statistics from two readings of a node's metrics, in Triton's exposition format."""

from __future__ import annotations

import pytest

from control_plane.stats.aggregate import Part, growth, histogram_quantile, summarize
from control_plane.stats.readings import parse_reading


def node_text(success: int, failure: int, generated: int, ttft: dict[str, int],
              waiting: int = 0, aborted: int = 0) -> str:
    lines = [
        "# TYPE nv_inference_request_success counter",
        f'nv_inference_request_success{{model="m.production",version="1"}} {success}',
        'nv_inference_request_success{model="other",version="1"} 1000',
        "# TYPE nv_inference_request_failure counter",
        f'nv_inference_request_failure{{model="m.production",version="1"}} {failure}',
        "# TYPE llm_generation_tokens_total counter",
        f'llm_generation_tokens_total{{model="m.production",version="1"}} {generated}',
        "# TYPE llm_time_to_first_token_seconds histogram",
    ]
    lines += [f'llm_time_to_first_token_seconds_bucket{{model="m.production",version="1",'
              f'le="{le}"}} {count}' for le, count in ttft.items()]
    lines += [
        "# TYPE llm_waiting_requests gauge",
        f'llm_waiting_requests{{model="m.production",version="1",priority="2"}} {waiting}',
        "# TYPE vllm:request_success counter",
        (f'vllm:request_success_total{{model="m.production",version="1",'
        f'finished_reason="abort"}} {aborted}'),
        (f'vllm:request_success_total{{model="m.production",version="1",'
        f'finished_reason="stop"}} {success}'),
    ]
    return "\n".join(lines) + "\n"


def part(older: str, newer: str, seconds: float) -> Part:
    before, after = parse_reading(older, 0.0), parse_reading(newer, seconds)
    now = after.by_model["m.production"]
    return Part(growth(before.by_model["m.production"], now), now, seconds)


def test_rates_quantiles_errors_and_gauges_of_one_window() -> None:
    older = node_text(10, 1, 100, {"0.1": 5, "0.5": 8, "1.0": 10, "+Inf": 10})
    # 20 requests more in 10 s (2 failed, 1 aborted); TTFTs of the 20: 10 under 0.1 s, 10 in
    # (0.1, 0.5].
    newer = node_text(28, 3, 300, {"0.1": 15, "0.5": 28, "1.0": 30, "+Inf": 30}, waiting=4,
                      aborted=1)
    stats = summarize([part(older, newer, 10.0)])
    assert stats.requests_per_second == pytest.approx(2.0)
    assert stats.errors_per_second == pytest.approx(0.2)
    assert stats.errors == {"failed": 2, "abort": 1}
    assert stats.generated_tokens_per_second == pytest.approx(20.0)
    assert stats.time_to_first_token_seconds.p50 == pytest.approx(0.1)
    # rank 19 of 20: 9 of the 10 in (0.1, 0.5], linearly interpolated.
    assert stats.time_to_first_token_seconds.p95 == pytest.approx(0.1 + 0.4 * 9 / 10)
    assert stats.waiting == {"2": 4}
    assert stats.queue_time_seconds.p50 is None  # nothing counted: no figure, not zero


def test_a_counter_that_went_down_was_reset_and_counts_from_zero() -> None:
    older = node_text(500, 0, 9000, {"0.1": 500, "+Inf": 500})
    newer = node_text(6, 0, 60, {"0.1": 6, "+Inf": 6})  # the node restarted
    stats = summarize([part(older, newer, 3.0)])
    assert stats.requests_per_second == pytest.approx(2.0)
    assert stats.generated_tokens_per_second == pytest.approx(20.0)


def test_totals_add_rates_and_take_quantiles_from_the_buckets_added_up() -> None:
    quick = part(node_text(0, 0, 0, {"0.1": 0, "1.0": 0, "+Inf": 0}),
                 node_text(10, 0, 10, {"0.1": 10, "1.0": 10, "+Inf": 10}), 10.0)
    slow = part(node_text(0, 0, 0, {"0.1": 0, "1.0": 0, "+Inf": 0}),
                node_text(10, 0, 10, {"0.1": 0, "1.0": 10, "+Inf": 10}), 5.0)
    total = summarize([quick, slow])
    assert total.requests_per_second == pytest.approx(1.0 + 2.0)
    assert total.time_to_first_token_seconds.p50 == pytest.approx(0.1)
    assert total.time_to_first_token_seconds.p95 == pytest.approx(0.1 + 0.9 * 9 / 10)


def test_histogram_quantile_follows_prometheus_at_the_edges() -> None:
    assert histogram_quantile(0.5, []) is None
    assert histogram_quantile(0.5, [(1.0, 0), (float("inf"), 0)]) is None
    # Everything above the highest finite bound: that bound is all Prometheus reports.
    assert histogram_quantile(0.5, [(1.0, 0), (float("inf"), 4)]) == 1.0
    # The first bucket interpolates from zero.
    assert histogram_quantile(0.5, [(2.0, 10), (float("inf"), 10)]) == pytest.approx(1.0)
