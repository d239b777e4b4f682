"""vLLM's own statistics published as the ``vllm:*`` metric families of Triton's stock vLLM
backend, so dashboards built for it work here unchanged.

Names, descriptions, labels (``model``, ``version``) and buckets are those of the stock backend's
``src/utils/metrics.py``; the families it lacks take vLLM's ``PrometheusStatLogger`` names,
descriptions and buckets. Every value comes from vLLM's ``IterationStats`` and ``SchedulerStats``.

Takes ``triton_python_backend_utils`` as an argument instead of importing it, so only the stub
(where that module exists) constructs it.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from vllm.config import VllmConfig
from vllm.v1.engine import FinishReason
from vllm.v1.metrics.buckets import REQUEST_LATENCY_BUCKETS, build_1_2_5_buckets
from vllm.v1.metrics.loggers import StatLoggerBase
from vllm.v1.metrics.stats import IterationStats, MultiModalCacheStats, SchedulerStats

log = logging.getLogger(__name__)

# The stock backend's buckets (taken there from vLLM's sample metrics).
TIME_TO_FIRST_TOKEN_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                               1.0, 2.5, 5.0, 7.5, 10.0]
TIME_PER_OUTPUT_TOKEN_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                                 1.0, 2.5]
E2E_REQUEST_LATENCY_BUCKETS = [1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0]
REQUEST_PARAMS_N_BUCKETS = [1.0, 2.0, 5.0, 10.0, 20.0]
# How long close() waits for the publisher to send what is queued.
CLOSE_TIMEOUT_S = 5.0

# One metric update: (metric key, "increment" | "observe" | "set", value).
_Update = tuple[str, str, float]


def _success_key(reason: FinishReason) -> str:
    return f"request_success.{reason}"


class StockStatLogger(StatLoggerBase):
    """A vLLM stat logger that publishes the stock backend's ``vllm:*`` families to Triton.

    ``record()`` runs on vLLM's output path and only queues updates; one publisher thread sends
    them, as each pb_utils metric call is a blocking round trip to the Triton process.
    """

    def __init__(self, vllm_config: VllmConfig, engine_index: int = 0, *, pb_utils: Any,
                 labels: dict[str, str]) -> None:
        family = pb_utils.MetricFamily
        token_buckets = build_1_2_5_buckets(vllm_config.model_config.max_model_len)
        self._families: list[Any] = []
        # Keyed by name, so queued updates hold no Metric: close() must release every one.
        self._metrics: dict[str, Any] = {}

        def add(key: str, name: str, description: str, kind: Any,
                buckets: list[float] | None = None) -> None:
            metric_family = family(name, description, kind)
            self._families.append(metric_family)
            if buckets is None:
                self._metrics[key] = metric_family.Metric(labels=labels)
            else:
                self._metrics[key] = metric_family.Metric(labels=labels, buckets=buckets)

        add("prompt_tokens", "vllm:prompt_tokens_total", "Number of prefill tokens processed.",
            family.COUNTER)
        add("generation_tokens", "vllm:generation_tokens_total",
            "Number of generation tokens processed.", family.COUNTER)
        success = family("vllm:request_success_total", "Count of successfully processed requests.",
                         family.COUNTER)
        self._families.append(success)
        # Every reason from the start, as vLLM does: a dashboard's rate() sees zeros, not gaps.
        for reason in FinishReason:
            self._metrics[_success_key(reason)] = success.Metric(
                labels={**labels, "finished_reason": str(reason)})
        add("time_to_first_token", "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.", family.HISTOGRAM,
            TIME_TO_FIRST_TOKEN_BUCKETS)
        add("time_per_output_token", "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.", family.HISTOGRAM,
            TIME_PER_OUTPUT_TOKEN_BUCKETS)
        add("e2e_request_latency", "vllm:e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.", family.HISTOGRAM,
            E2E_REQUEST_LATENCY_BUCKETS)
        add("request_queue_time", "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.", family.HISTOGRAM,
            list(REQUEST_LATENCY_BUCKETS))
        add("request_inference_time", "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.", family.HISTOGRAM,
            list(REQUEST_LATENCY_BUCKETS))
        add("request_prompt_tokens", "vllm:request_prompt_tokens",
            "Number of prefill tokens processed.", family.HISTOGRAM, token_buckets)
        add("request_generation_tokens", "vllm:request_generation_tokens",
            "Number of generation tokens processed.", family.HISTOGRAM, token_buckets)
        add("request_params_n", "vllm:request_params_n", "Histogram of the n request parameter.",
            family.HISTOGRAM, REQUEST_PARAMS_N_BUCKETS)
        add("request_params_max_tokens", "vllm:request_params_max_tokens",
            "Histogram of the max_tokens request parameter.", family.HISTOGRAM, token_buckets)
        add("num_requests_running", "vllm:num_requests_running",
            "Number of requests in model execution batches.", family.GAUGE)
        add("num_requests_waiting", "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.", family.GAUGE)
        add("kv_cache_usage_perc", "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.", family.GAUGE)
        # A Triton gauge starts at 0; only changes are sent (vLLM reports after every step).
        self._gauges: dict[str, float] = dict.fromkeys(
            ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"), 0.0)
        self._failed: set[str] = set()
        self._closed = False
        self._updates: queue.SimpleQueue[list[_Update] | None] = queue.SimpleQueue()
        self._publisher = threading.Thread(target=self._publish, name="vllm-stock-metrics",
                                           daemon=True)
        self._publisher.start()

    def record(self, scheduler_stats: SchedulerStats | None,
               iteration_stats: IterationStats | None,
               mm_cache_stats: MultiModalCacheStats | None = None, engine_idx: int = 0) -> None:
        if self._closed:
            return
        updates: list[_Update] = []
        if scheduler_stats is not None:
            self._gauge_updates(scheduler_stats, updates)
        if iteration_stats is not None:
            self._iteration_updates(iteration_stats, updates)
        if updates:
            self._updates.put(updates)

    def _gauge_updates(self, stats: SchedulerStats, updates: list[_Update]) -> None:
        # Waiting counts deferred requests too, as vLLM's own vllm:num_requests_waiting does.
        current = {
            "num_requests_running": stats.num_running_reqs,
            "num_requests_waiting": stats.num_waiting_reqs + stats.num_skipped_waiting_reqs,
            "kv_cache_usage_perc": stats.kv_cache_usage,
        }
        for key, value in current.items():
            if self._gauges[key] != value:
                self._gauges[key] = value
                updates.append((key, "set", value))

    @staticmethod
    def _iteration_updates(stats: IterationStats, updates: list[_Update]) -> None:
        for key, count in (("prompt_tokens", stats.num_prompt_tokens),
                           ("generation_tokens", stats.num_generation_tokens)):
            if count:
                updates.append((key, "increment", count))
        for key, values in (("time_to_first_token", stats.time_to_first_tokens_iter),
                            ("time_per_output_token", stats.inter_token_latencies_iter),
                            ("request_params_n", stats.n_params_iter)):
            updates.extend((key, "observe", value) for value in values)
        for finished in stats.finished_requests:
            updates.append((_success_key(finished.finish_reason), "increment", 1))
            updates.append(("e2e_request_latency", "observe", finished.e2e_latency))
            updates.append(("request_queue_time", "observe", finished.queued_time))
            updates.append(("request_inference_time", "observe", finished.inference_time))
            updates.append(("request_prompt_tokens", "observe", finished.num_prompt_tokens))
            updates.append(("request_generation_tokens", "observe",
                            finished.num_generation_tokens))
            # As vLLM: only requests that set max_tokens (None means "up to max_model_len").
            if finished.max_tokens_param:
                updates.append(("request_params_max_tokens", "observe",
                                finished.max_tokens_param))

    def _publish(self) -> None:
        while (updates := self._updates.get()) is not None:
            for key, method, value in updates:
                metric = self._metrics.get(key)
                if metric is None:
                    continue
                try:
                    getattr(metric, method)(value)
                except Exception:  # the publisher must outlive one bad update
                    if key not in self._failed:
                        self._failed.add(key)
                        log.exception("publishing %s failed (further failures not logged)", key)

    def log_engine_initialized(self) -> None:
        return None

    def close(self) -> None:
        """Send what is queued, stop the publisher and release every metric, from ``finalize``:
        a metric destroyed later, at interpreter exit, crashes the stub."""
        if self._closed:
            return
        self._closed = True
        self._updates.put(None)
        self._publisher.join(timeout=CLOSE_TIMEOUT_S)
        if self._publisher.is_alive():
            log.warning("the vllm:* metrics publisher did not stop within %.0f s",
                        CLOSE_TIMEOUT_S)
        self._metrics.clear()
        self._families.clear()


class StockMetricsFactory:
    """vLLM's per-engine stat-logger factory for the stock ``vllm:*`` families; keeps what it
    builds so ``finalize`` can close them."""

    def __init__(self, pb_utils: Any, model: str, version: str) -> None:
        self._pb_utils = pb_utils
        # The stock backend's label names (src/model.py, _setup_metrics).
        self._labels = {"model": model, "version": version}
        self._loggers: list[StockStatLogger] = []

    def __call__(self, vllm_config: VllmConfig, engine_index: int = 0) -> StockStatLogger:
        stat_logger = StockStatLogger(vllm_config, engine_index, pb_utils=self._pb_utils,
                                      labels=self._labels)
        self._loggers.append(stat_logger)
        return stat_logger

    def close(self) -> None:
        for stat_logger in self._loggers:
            stat_logger.close()
        self._loggers.clear()
