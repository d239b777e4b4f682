"""Statistics of a window from two readings: rates from counter differences, quantiles from
histogram bucket differences (Prometheus's ``histogram_quantile``), gauges from the newer one.

Pure: readings in, numbers out, so every formula tests on text written by hand.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from control_plane.stats import readings as r
from control_plane.stats.readings import Series

GAUGES = frozenset({r.WAITING, r.RUNNING})
# vLLM's finished reasons that are failures rather than answers.
ERROR_REASONS = ("abort", "error")


@dataclass(frozen=True)
class Quantiles:
    p50: float | None
    p95: float | None


@dataclass(frozen=True)
class Part:
    """One deployment's share of a window: what its counters grew by, its gauges now, and the
    seconds between the two readings."""

    grown: Series
    now: Series
    seconds: float


@dataclass(frozen=True)
class WindowStats:
    seconds: float
    requests_per_second: float
    errors_per_second: float
    # Requests ended in the window, by kind: failed (Triton answered an error), abort (the
    # client went away or a deadline passed), error (the engine failed the request).
    errors: dict[str, float]
    prompt_tokens_per_second: float
    generated_tokens_per_second: float
    queue_time_seconds: Quantiles
    time_to_first_token_seconds: Quantiles
    inter_token_latency_seconds: Quantiles
    # Now, by priority level ("1" is the most urgent).
    waiting: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)


def growth(older: Series, newer: Series) -> Series:
    """How much each counter and bucket grew; a series that went down was reset (the node or
    its model restarted) and grew by its new value, as Prometheus's ``increase`` assumes."""
    grown: Series = {}
    for key, value in newer.items():
        if key[0] in GAUGES:
            continue
        before = older.get(key, 0.0)
        grown[key] = value - before if value >= before else value
    return grown


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus's estimate of quantile ``q`` from cumulative (upper bound, count) buckets;
    None when the histogram counted nothing."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    total = ordered[-1][1]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for upper_bound, count in ordered:
        if count >= rank:
            if math.isinf(upper_bound):
                # Above the highest finite bucket: its bound is all that is known.
                return lower_bound
            if count == lower_count:
                return upper_bound
            return lower_bound + (upper_bound - lower_bound) * (rank - lower_count) / (
                count - lower_count)
        lower_bound, lower_count = upper_bound, count
    return ordered[-1][0]


def summarize(parts: Sequence[Part]) -> WindowStats:
    """The statistics of one deployment (one part) or several together (rates add up;
    quantiles come from the buckets added up)."""
    rates: dict[str, float] = defaultdict(float)
    buckets: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    errors: dict[str, float] = defaultdict(float)
    waiting: dict[str, float] = defaultdict(float)
    running: dict[str, float] = defaultdict(float)
    for part in parts:
        for (name, labels), value in part.grown.items():
            label = dict(labels)
            if name in (r.TTFT, r.ITL, r.QUEUE_TIME):
                buckets[name][float(label["le"])] += value
            elif name == r.FINISHED:
                if label.get("finished_reason") in ERROR_REASONS:
                    errors[label["finished_reason"]] += value
            else:
                rates[name] += value / part.seconds if part.seconds > 0 else 0.0
                if name == r.REQUEST_FAILURE:
                    errors["failed"] += value
        for (name, labels), value in part.now.items():
            level = dict(labels).get("priority", "")
            if name == r.WAITING:
                waiting[level] += value
            elif name == r.RUNNING:
                running[level] += value

    def quantiles(name: str) -> Quantiles:
        cumulative = list(buckets[name].items())
        return Quantiles(histogram_quantile(0.5, cumulative), histogram_quantile(0.95, cumulative))

    return WindowStats(
        seconds=max((part.seconds for part in parts), default=0.0),
        requests_per_second=rates[r.REQUEST_SUCCESS] + rates[r.REQUEST_FAILURE],
        errors_per_second=rates[r.REQUEST_FAILURE],
        errors={kind: count for kind, count in errors.items() if count},
        prompt_tokens_per_second=rates[r.PROMPT_TOKENS],
        generated_tokens_per_second=rates[r.GENERATED_TOKENS],
        queue_time_seconds=quantiles(r.QUEUE_TIME),
        time_to_first_token_seconds=quantiles(r.TTFT),
        inter_token_latency_seconds=quantiles(r.ITL),
        waiting=dict(sorted(waiting.items())),
        running=dict(sorted(running.items())))
