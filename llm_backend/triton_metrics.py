"""The backend's custom metrics, published through Triton's metrics API on its /metrics port.

Takes ``triton_python_backend_utils`` as an argument instead of importing it, so only the stub
(where that module exists) constructs it.
"""

from __future__ import annotations

import threading
from typing import Any

TTFT_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]
ITL_BUCKETS = [0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0]


class TritonBackendMetrics:
    """Counters, histograms and gauges labelled by model and version (and priority level)."""

    def __init__(self, pb_utils: Any, model: str, version: str, levels: int) -> None:
        family = pb_utils.MetricFamily
        labels = {"model": model, "version": version}
        self._lock = threading.Lock()
        self._families = [
            prompt := family("llm_prompt_tokens_total", "Prompt tokens admitted", family.COUNTER),
            generated := family("llm_generation_tokens_total", "Tokens generated", family.COUNTER),
            ttft := family("llm_time_to_first_token_seconds",
                           "From the backend receiving a request to its first token",
                           family.HISTOGRAM),
            itl := family("llm_inter_token_latency_seconds", "Time between generated tokens",
                          family.HISTOGRAM),
            inflight := family("llm_inflight_requests",
                               "Requests running in the engine, by priority level", family.GAUGE),
            waiting := family("llm_waiting_requests",
                              "Requests waiting in the backend's priority queue for an engine "
                              "slot, by priority level", family.GAUGE),
            engine := family("llm_engine_requests",
                             "Requests inside vLLM's scheduler, by state", family.GAUGE),
            tenant_requests := family("llm_tenant_requests_total",
                                      "Requests the engine ran for a gateway tenant, counted as "
                                      "each ends", family.COUNTER),
            tenant_generated := family("llm_tenant_generation_tokens_total",
                                       "Tokens generated for a gateway tenant, counted as each "
                                       "request ends", family.COUNTER),
            tenant_running := family("llm_tenant_running_requests",
                                     "Requests of a gateway tenant running in the engine",
                                     family.GAUGE),
            tenant_waiting := family("llm_tenant_waiting_requests",
                                     "Requests of a gateway tenant waiting in the backend's "
                                     "queue for an engine slot (every level)", family.GAUGE),
            tenant_preempted := family("llm_tenant_preemptions_total",
                                       "Requests of a gateway tenant stopped to give another "
                                       "tenant a slot (each resumes later)", family.COUNTER),
        ]
        self._labels = labels
        self._queue_families: tuple[Any, ...] = (tenant_running, tenant_waiting, tenant_preempted)
        # tenant -> (running, waiting, preempted) metrics, and the preemptions published so far.
        self._tenant_queue: dict[str, tuple[Any, Any, Any]] = {}
        self._preemptions_published: dict[str, int] = {}
        self._tenant_families: tuple[Any, ...] = (tenant_requests, tenant_generated)
        # tenant -> (requests, generated tokens); created on a tenant's first request, as
        # tenants are known only from the requests the gateway sends.
        self._tenants: dict[str, tuple[Any, Any]] = {}
        self._prompt = prompt.Metric(labels=labels)
        self._generated = generated.Metric(labels=labels)
        self._ttft = ttft.Metric(labels=labels, buckets=TTFT_BUCKETS)
        self._itl = itl.Metric(labels=labels, buckets=ITL_BUCKETS)
        self._inflight = {
            level: inflight.Metric(labels={**labels, "priority": str(level)})
            for level in range(1, levels + 1)
        }
        self._waiting = {
            level: waiting.Metric(labels={**labels, "priority": str(level)})
            for level in range(1, levels + 1)
        }
        self._engine_running = engine.Metric(labels={**labels, "state": "running"})
        self._engine_waiting = engine.Metric(labels={**labels, "state": "waiting"})
        self._engine_counts: tuple[int, int] | None = None
        self._last_set: dict[Any, int] = {}
        self._closed = False

    def close(self) -> None:
        """Release every metric now, from ``finalize``: a metric destroyed later, at interpreter
        exit, touches the stub's already-freed shared memory and crashes the stub."""
        with self._lock:
            self._closed = True
            self._inflight.clear()
            self._waiting.clear()
            self._tenants.clear()
            self._tenant_families = ()
            self._tenant_queue.clear()
            self._queue_families = ()
            self._last_set.clear()
            for name in ("_prompt", "_generated", "_ttft", "_itl", "_engine_running",
                         "_engine_waiting"):
                setattr(self, name, None)
            self._families.clear()

    def observe_prompt_tokens(self, count: int) -> None:
        if not self._closed:
            self._prompt.increment(count)

    def observe_generated_tokens(self, count: int) -> None:
        if not self._closed:
            self._generated.increment(count)

    def observe_time_to_first_token(self, seconds: float) -> None:
        if not self._closed:
            self._ttft.observe(seconds)

    def observe_inter_token_latency(self, seconds: float) -> None:
        if not self._closed:
            self._itl.observe(seconds)

    def observe_tenant_request(self, tenant: str, generated_tokens: int) -> None:
        with self._lock:
            if self._closed:
                return
            counters = self._tenants.get(tenant)
            if counters is None:
                labels = {**self._labels, "tenant": tenant}
                counters = tuple(family.Metric(labels=labels) for family in self._tenant_families)
                self._tenants[tenant] = counters
            # Under the lock, so close() cannot release the counters in between.
            requests, generated = counters
            requests.increment(1)
            if generated_tokens:
                generated.increment(generated_tokens)

    def set_requests(self, inflight: dict[int, int], waiting: dict[int, int]) -> None:
        """Set the per-level gauges. Only values that changed are sent: each update is a
        blocking message to the Triton process."""
        with self._lock:
            if self._closed:
                return
            for gauges, values in ((self._inflight, inflight), (self._waiting, waiting)):
                for level, gauge in gauges.items():
                    value = values.get(level, 0)
                    if self._last_set.get(gauge) != value:
                        gauge.set(value)
                        self._last_set[gauge] = value

    def set_tenant_requests(self, tenants: dict[str, tuple[int, int, int]]) -> None:
        """Per named tenant: running and waiting gauges and the preemptions counter (requests
        without a tenant show in the per-level gauges only). Only changes are sent."""
        with self._lock:
            if self._closed:
                return
            for tenant, (running, waiting, preempted) in tenants.items():
                if not tenant:
                    continue
                metrics = self._tenant_queue.get(tenant)
                if metrics is None:
                    labels = {**self._labels, "tenant": tenant}
                    metrics = tuple(family.Metric(labels=labels)
                                    for family in self._queue_families)
                    self._tenant_queue[tenant] = metrics
                running_gauge, waiting_gauge, preempted_counter = metrics
                for gauge, value in ((running_gauge, running), (waiting_gauge, waiting)):
                    if self._last_set.get(gauge) != value:
                        gauge.set(value)
                        self._last_set[gauge] = value
                new = preempted - self._preemptions_published.get(tenant, 0)
                if new > 0:
                    preempted_counter.increment(new)
                    self._preemptions_published[tenant] = preempted

    def set_engine_requests(self, running: int, waiting: int) -> None:
        # Called after every engine step: unchanged counts send nothing.
        with self._lock:
            if self._closed or (running, waiting) == self._engine_counts:
                return
            self._engine_counts = (running, waiting)
            self._engine_running.set(running)
            self._engine_waiting.set(waiting)
