"""Unit tests for llm_backend.stock_metrics: real vLLM stats in, the stock vLLM backend's
``vllm:*`` families out, through a stand-in for pb_utils' metric API."""

from __future__ import annotations

import gc
import json
import threading
import weakref
from types import SimpleNamespace
from typing import Any

import pytest
from vllm.v1.engine import FinishReason
from vllm.v1.metrics.buckets import REQUEST_LATENCY_BUCKETS
from vllm.v1.metrics.stats import FinishedRequestStats, IterationStats, SchedulerStats

from control_plane.triton.model_config import read_pbtxt, to_load_json
from control_plane.triton.runtime import PROJECT_ROOT
from llm_backend.settings import SettingsError, settings_from
from llm_backend.stock_metrics import StockMetricsFactory

LABELS = {"model": "smollm2", "version": "1"}
# What the logger reads of vLLM's config.
VLLM_CONFIG = SimpleNamespace(model_config=SimpleNamespace(max_model_len=2048))


class Recorder:
    """pb_utils.MetricFamily's surface. Keeps only weak references to what it hands out, as
    Triton does, so a test can tell whether the logger still holds a metric."""

    def __init__(self) -> None:
        self.families: dict[str, dict[str, Any]] = {}
        self.metrics: list[weakref.ref[Any]] = []
        self.updates: list[tuple[str, dict[str, str], str, float]] = []
        self.failing: set[str] = set()
        # family name -> event a send of it waits for; the threads that sent, by name.
        self.held: dict[str, threading.Event] = {}
        self.sending = threading.Event()
        self.sender_threads: list[str] = []
        recorder = self

        class MetricFamily:
            COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"

            def __init__(self, name: str, description: str, kind: str) -> None:
                self.name = name
                recorder.families[name] = {"kind": kind, "help": description, "metrics": []}
                recorder.metrics.append(weakref.ref(self))

            def Metric(self, labels: dict[str, str], buckets: list[float] | None = None):
                metric = Metric(self.name, labels)
                recorder.families[self.name]["metrics"].append(
                    {"labels": labels, "buckets": buckets})
                recorder.metrics.append(weakref.ref(metric))
                return metric

        class Metric:
            def __init__(self, name: str, labels: dict[str, str]) -> None:
                self.name, self.labels = name, labels

            def _send(self, method: str, value: float) -> None:
                recorder.sender_threads.append(threading.current_thread().name)
                if self.name in recorder.held:
                    recorder.sending.set()
                    recorder.held[self.name].wait(5)
                if self.name in recorder.failing:
                    raise RuntimeError("the Triton process did not answer")
                recorder.updates.append((self.name, self.labels, method, value))

            def increment(self, value: float) -> None:
                self._send("increment", value)

            def set(self, value: float) -> None:
                self._send("set", value)

            def observe(self, value: float) -> None:
                self._send("observe", value)

        self.pb_utils = SimpleNamespace(MetricFamily=MetricFamily)

    def sent(self, name: str) -> list[tuple[str, float]]:
        return [(method, value) for family, _, method, value in self.updates if family == name]

    def live_objects(self) -> int:
        gc.collect()
        return sum(ref() is not None for ref in self.metrics)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def factory(recorder: Recorder) -> StockMetricsFactory:
    return StockMetricsFactory(recorder.pb_utils, "smollm2", "1")


def finished(reason: FinishReason, prompt: int, generated: int, max_tokens: int | None = None,
             e2e: float = 0.5) -> FinishedRequestStats:
    return FinishedRequestStats(
        finish_reason=reason, e2e_latency=e2e, num_prompt_tokens=prompt,
        num_generation_tokens=generated, max_tokens_param=max_tokens, queued_time=0.01,
        inference_time=0.4)


def iteration(prompt_tokens: int = 0, generated_tokens: int = 0,
              ttfts: tuple[float, ...] = (), itls: tuple[float, ...] = (),
              n_params: tuple[int, ...] = (),
              done: tuple[FinishedRequestStats, ...] = ()) -> IterationStats:
    stats = IterationStats()
    stats.prompt_token_stats.total = prompt_tokens
    stats.prompt_token_stats.computed = prompt_tokens
    stats.num_generation_tokens = generated_tokens
    stats.time_to_first_tokens_iter.extend(ttfts)
    stats.inter_token_latencies_iter.extend(itls)
    stats.n_params_iter.extend(n_params)
    stats.finished_requests.extend(done)
    return stats


# -- families, labels, buckets -------------------------------------------------------------------


def test_the_stock_families_exist_with_the_stock_labels_and_buckets(recorder, factory):
    factory(VLLM_CONFIG, 0)
    families = recorder.families
    kinds = {name: family["kind"] for name, family in families.items()}
    assert kinds == {
        "vllm:prompt_tokens_total": "counter",
        "vllm:generation_tokens_total": "counter",
        "vllm:request_success_total": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:time_per_output_token_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:request_queue_time_seconds": "histogram",
        "vllm:request_inference_time_seconds": "histogram",
        "vllm:request_prompt_tokens": "histogram",
        "vllm:request_generation_tokens": "histogram",
        "vllm:request_params_n": "histogram",
        "vllm:request_params_max_tokens": "histogram",
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
    }
    # The stock backend's descriptions, where it has the family.
    assert families["vllm:prompt_tokens_total"]["help"] == "Number of prefill tokens processed."
    assert families["vllm:e2e_request_latency_seconds"]["help"] == \
        "Histogram of end to end request latency in seconds."
    for name, family in families.items():
        if name != "vllm:request_success_total":
            assert [m["labels"] for m in family["metrics"]] == [LABELS], name
    # One counter per finish reason from the start, labelled as vLLM's own logger labels them.
    assert [m["labels"] for m in families["vllm:request_success_total"]["metrics"]] == [
        {**LABELS, "finished_reason": reason}
        for reason in ("stop", "length", "abort", "error", "repetition")]

    def buckets(name: str) -> list[float] | None:
        return families[name]["metrics"][0]["buckets"]

    assert buckets("vllm:time_to_first_token_seconds") == [
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
    assert buckets("vllm:time_per_output_token_seconds") == [
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]
    assert buckets("vllm:e2e_request_latency_seconds") == [
        1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0]
    assert buckets("vllm:request_queue_time_seconds") == list(REQUEST_LATENCY_BUCKETS)
    assert buckets("vllm:request_params_n") == [1, 2, 5, 10, 20]
    # build_1_2_5_buckets(max_model_len)
    token_buckets = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]
    for name in ("vllm:request_prompt_tokens", "vllm:request_generation_tokens",
                 "vllm:request_params_max_tokens"):
        assert buckets(name) == token_buckets, name
    assert buckets("vllm:prompt_tokens_total") is None
    factory.close()


# -- what record() publishes ---------------------------------------------------------------------


def test_iteration_stats_become_counter_and_histogram_updates(recorder, factory):
    stat_logger = factory(VLLM_CONFIG, 0)
    stat_logger.record(None, iteration(prompt_tokens=7, generated_tokens=1, ttfts=(0.03,),
                                       n_params=(1,)))
    stat_logger.record(None, iteration(generated_tokens=2, itls=(0.02, 0.025)))
    stat_logger.record(None, iteration(
        generated_tokens=1, itls=(0.03,),
        done=(finished(FinishReason.LENGTH, prompt=7, generated=4, max_tokens=4),)))
    factory.close()  # sends what is queued first
    assert recorder.sent("vllm:prompt_tokens_total") == [("increment", 7)]
    assert recorder.sent("vllm:generation_tokens_total") == [
        ("increment", 1), ("increment", 2), ("increment", 1)]
    assert recorder.sent("vllm:time_to_first_token_seconds") == [("observe", 0.03)]
    assert recorder.sent("vllm:time_per_output_token_seconds") == [
        ("observe", 0.02), ("observe", 0.025), ("observe", 0.03)]
    assert recorder.sent("vllm:request_params_n") == [("observe", 1)]
    assert recorder.sent("vllm:e2e_request_latency_seconds") == [("observe", 0.5)]
    assert recorder.sent("vllm:request_queue_time_seconds") == [("observe", 0.01)]
    assert recorder.sent("vllm:request_inference_time_seconds") == [("observe", 0.4)]
    assert recorder.sent("vllm:request_prompt_tokens") == [("observe", 7)]
    assert recorder.sent("vllm:request_generation_tokens") == [("observe", 4)]
    assert recorder.sent("vllm:request_params_max_tokens") == [("observe", 4)]
    success = [(labels["finished_reason"], method, value) for name, labels, method, value
               in recorder.updates if name == "vllm:request_success_total"]
    assert success == [("length", "increment", 1)]
    # The prompt counter is sent once: a zero count sends nothing.
    assert len(recorder.sent("vllm:prompt_tokens_total")) == 1


def test_each_finished_request_counts_under_its_own_reason(recorder, factory):
    stat_logger = factory(VLLM_CONFIG, 0)
    stat_logger.record(None, iteration(done=(
        finished(FinishReason.STOP, 3, 2), finished(FinishReason.ABORT, 5, 0),
        finished(FinishReason.STOP, 4, 9))))
    factory.close()
    success = [labels["finished_reason"] for name, labels, _, _ in recorder.updates
               if name == "vllm:request_success_total"]
    assert sorted(success) == ["abort", "stop", "stop"]
    # A request without max_tokens (vLLM: up to max_model_len) is not observed, as in vLLM.
    assert recorder.sent("vllm:request_params_max_tokens") == []
    assert recorder.sent("vllm:request_prompt_tokens") == [
        ("observe", 3), ("observe", 5), ("observe", 4)]


def test_gauges_follow_scheduler_stats_and_unchanged_values_are_not_sent(recorder, factory):
    stat_logger = factory(VLLM_CONFIG, 0)
    # Idle: every gauge is still at Triton's initial 0, nothing to send.
    stat_logger.record(SchedulerStats(), None)
    busy = SchedulerStats(num_running_reqs=2, num_waiting_reqs=1, num_skipped_waiting_reqs=1,
                          kv_cache_usage=0.25)
    stat_logger.record(busy, None)
    stat_logger.record(SchedulerStats(num_running_reqs=2, num_waiting_reqs=1,
                                      num_skipped_waiting_reqs=1, kv_cache_usage=0.25), None)
    stat_logger.record(SchedulerStats(num_running_reqs=3, num_waiting_reqs=0,
                                      num_skipped_waiting_reqs=2, kv_cache_usage=0.25), None)
    stat_logger.record(SchedulerStats(), None)
    factory.close()
    assert recorder.sent("vllm:num_requests_running") == [("set", 2), ("set", 3), ("set", 0)]
    # Waiting counts deferred requests too, as vLLM's gauge does: 1 + 1, then 0 + 2 (unchanged).
    assert recorder.sent("vllm:num_requests_waiting") == [("set", 2), ("set", 0)]
    assert recorder.sent("vllm:kv_cache_usage_perc") == [("set", 0.25), ("set", 0.0)]


def test_record_only_queues_the_publisher_thread_sends(recorder, factory):
    stat_logger = factory(VLLM_CONFIG, 0)
    release = recorder.held["vllm:num_requests_running"] = threading.Event()
    stat_logger.record(SchedulerStats(num_running_reqs=1), None)
    assert recorder.sending.wait(5)
    # The publisher is stuck in a Triton round trip, and record() still returns at once.
    stat_logger.record(SchedulerStats(num_running_reqs=1, kv_cache_usage=0.5),
                       iteration(generated_tokens=3))
    assert recorder.updates == []
    release.set()
    factory.close()
    assert set(recorder.sender_threads) == {"vllm-stock-metrics"}
    assert recorder.sent("vllm:num_requests_running") == [("set", 1)]
    assert recorder.sent("vllm:kv_cache_usage_perc") == [("set", 0.5)]
    assert recorder.sent("vllm:generation_tokens_total") == [("increment", 3)]


def test_a_failing_update_does_not_stop_the_publisher(recorder, factory, caplog):
    stat_logger = factory(VLLM_CONFIG, 0)
    recorder.failing.add("vllm:prompt_tokens_total")
    stat_logger.record(None, iteration(prompt_tokens=3, generated_tokens=1))
    stat_logger.record(None, iteration(prompt_tokens=2, generated_tokens=1))
    factory.close()
    assert recorder.sent("vllm:generation_tokens_total") == [("increment", 1), ("increment", 1)]
    # Logged once, not once per update.
    assert [r.message for r in caplog.records].count(
        "publishing prompt_tokens failed (further failures not logged)") == 1


# -- close() -------------------------------------------------------------------------------------


def test_close_stops_the_publisher_and_releases_every_metric(recorder, factory):
    stat_logger = factory(VLLM_CONFIG, 0)
    stat_logger.record(SchedulerStats(num_running_reqs=1), iteration(prompt_tokens=4))
    assert recorder.live_objects() > 0
    factory.close()
    assert "vllm-stock-metrics" not in {thread.name for thread in threading.enumerate()}
    # Not one Metric or MetricFamily is left for interpreter exit to destroy (which crashes the
    # stub), though vLLM may still hold the logger itself.
    assert recorder.live_objects() == 0
    sent = len(recorder.updates)
    stat_logger.record(SchedulerStats(num_running_reqs=5), iteration(prompt_tokens=4))
    stat_logger.close()
    assert len(recorder.updates) == sent


def test_the_factory_closes_every_logger_it_built(recorder, factory):
    first, second = factory(VLLM_CONFIG, 0), factory(VLLM_CONFIG, 1)
    first.record(None, iteration(prompt_tokens=1))
    second.record(None, iteration(prompt_tokens=2))
    factory.close()
    # Each logger has its own publisher thread: the order between them is not fixed.
    assert sorted(recorder.sent("vllm:prompt_tokens_total")) == [("increment", 1),
                                                                 ("increment", 2)]
    assert recorder.live_objects() == 0
    factory.close()


# -- the REPORT_CUSTOM_METRICS setting -----------------------------------------------------------


def parameters(**values: str) -> dict[str, Any]:
    return {"parameters": {key: {"string_value": value} for key, value in values.items()}}


def report(model_config: dict[str, Any]) -> bool:
    return settings_from(model_config, {"model": "m"}).report_custom_metrics


def test_report_custom_metrics_is_off_by_default_as_in_the_stock_backend():
    assert report({}) is False
    assert report(parameters(REPORT_CUSTOM_METRICS="  ")) is False


@pytest.mark.parametrize(("text", "expected"), [
    ("true", True), ("True", True), ("TRUE", True), ("yes", True), ("1", True), ("on", True),
    ("false", False), ("False", False), ("no", False), ("0", False), ("off", False)])
def test_report_custom_metrics_accepts_the_usual_spellings(text, expected):
    assert report(parameters(REPORT_CUSTOM_METRICS=text)) is expected


@pytest.mark.parametrize("text", ["enabled", "2", "ture"])
def test_report_custom_metrics_refuses_anything_else(text):
    with pytest.raises(SettingsError) as info:
        report(parameters(REPORT_CUSTOM_METRICS=text))
    assert str(info.value) == (
        f"parameters.REPORT_CUSTOM_METRICS: expected true or false, got {text!r} "
        "(accepted, any case: true, 1, yes, on / false, 0, no, off)")


def test_the_shipped_config_reports_the_stock_metrics():
    shipped = json.loads(to_load_json(read_pbtxt(
        PROJECT_ROOT / "model_repository" / "smollm2" / "config.pbtxt")))
    assert report(shipped) is True
