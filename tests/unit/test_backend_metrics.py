"""Unit tests for llm_backend.triton_metrics with a stand-in for pb_utils' metric API."""

from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

import pytest

from llm_backend.triton_metrics import TritonBackendMetrics


class Recorder:
    """pb_utils.MetricFamily's surface: families, labelled metrics, and every update sent."""

    def __init__(self) -> None:
        self.families: dict[str, SimpleNamespace] = {}
        self.updates: list[tuple[str, dict[str, str], str, float]] = []
        recorder = self

        class MetricFamily:
            COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"

            def __init__(self, name: str, description: str, kind: str) -> None:
                self.name = name
                self.metrics: list[Metric] = []
                recorder.families[name] = SimpleNamespace(kind=kind, help=description,
                                                          metrics=self.metrics)

            def Metric(self, labels: dict[str, str], buckets: list[float] | None = None):
                metric = Metric(self.name, labels)
                self.metrics.append(metric)
                return metric

        class Metric:
            def __init__(self, name: str, labels: dict[str, str]) -> None:
                self.name, self.labels, self.value = name, labels, 0.0

            def increment(self, value: float) -> None:
                self.value += value
                recorder.updates.append((self.name, self.labels, "increment", value))

            def set(self, value: float) -> None:
                self.value = value
                recorder.updates.append((self.name, self.labels, "set", value))

            def observe(self, value: float) -> None:
                recorder.updates.append((self.name, self.labels, "observe", value))

        self.pb_utils = SimpleNamespace(MetricFamily=MetricFamily)

    def values(self, family: str) -> dict[str, float]:
        return {m.labels.get("tenant", ""): m.value for m in self.families[family].metrics}


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def metrics(recorder: Recorder) -> TritonBackendMetrics:
    return TritonBackendMetrics(recorder.pb_utils, "smollm2", "1", levels=3)


def test_tenant_counter_families_exist_before_any_tenant(recorder, metrics):
    for name in ("llm_tenant_requests_total", "llm_tenant_generation_tokens_total"):
        assert recorder.families[name].kind == "counter"
        # Requests without a tenant are not counted here at all: no unlabelled series.
        assert recorder.families[name].metrics == []


def test_a_tenant_gets_its_counters_on_its_first_request(recorder, metrics):
    metrics.observe_tenant_request("acme", 12)
    metrics.observe_tenant_request("acme", 3)
    metrics.observe_tenant_request("globex", 5)
    assert recorder.values("llm_tenant_requests_total") == {"acme": 2, "globex": 1}
    assert recorder.values("llm_tenant_generation_tokens_total") == {"acme": 15, "globex": 5}
    (acme, globex) = recorder.families["llm_tenant_requests_total"].metrics
    assert acme.labels == {"model": "smollm2", "version": "1", "tenant": "acme"}
    assert globex.labels == {"model": "smollm2", "version": "1", "tenant": "globex"}


def test_a_request_is_one_update_per_counter_and_none_for_zero_tokens(recorder, metrics):
    metrics.observe_tenant_request("acme", 7)
    assert len(recorder.updates) == 2
    metrics.observe_tenant_request("acme", 0)
    assert len(recorder.updates) == 3
    assert recorder.values("llm_tenant_generation_tokens_total") == {"acme": 7}


def test_tenant_queue_gauges_and_preemptions_send_only_changes(recorder, metrics):
    metrics.set_tenant_requests({"acme": (2, 5, 0), "": (1, 1, 0)})
    assert recorder.values("llm_tenant_running_requests") == {"acme": 2}
    assert recorder.values("llm_tenant_waiting_requests") == {"acme": 5}
    sent = len(recorder.updates)
    metrics.set_tenant_requests({"acme": (2, 5, 0)})
    assert len(recorder.updates) == sent  # nothing changed, nothing sent
    metrics.set_tenant_requests({"acme": (1, 5, 1), "globex": (1, 0, 0)})
    metrics.set_tenant_requests({"acme": (1, 0, 3), "globex": (0, 0, 0)})
    assert recorder.values("llm_tenant_running_requests") == {"acme": 1, "globex": 0}
    assert recorder.values("llm_tenant_waiting_requests") == {"acme": 0, "globex": 0}
    # A counter: the scheduler's running total, published as increments.
    assert recorder.families["llm_tenant_preemptions_total"].kind == "counter"
    assert recorder.values("llm_tenant_preemptions_total") == {"acme": 3, "globex": 0}


def test_nothing_is_sent_after_close(recorder, metrics):
    metrics.observe_tenant_request("acme", 1)
    metrics.close()
    sent = len(recorder.updates)
    metrics.observe_tenant_request("acme", 1)
    metrics.observe_tenant_request("new", 1)
    metrics.observe_generated_tokens(1)
    assert len(recorder.updates) == sent
    assert "new" not in recorder.values("llm_tenant_requests_total")


def test_close_releases_every_metric_family(recorder):
    # A family still referenced at interpreter exit is destroyed after the stub's shared memory
    # is gone, and crashes the stub.
    made: list[weakref.ref[object]] = []

    class Tracked(recorder.pb_utils.MetricFamily):
        def __init__(self, *args: str) -> None:
            super().__init__(*args)
            made.append(weakref.ref(self))

    metrics = TritonBackendMetrics(SimpleNamespace(MetricFamily=Tracked), "smollm2", "1", levels=3)
    metrics.observe_tenant_request("acme", 1)
    metrics.set_tenant_requests({"acme": (1, 1, 1)})
    metrics.close()
    gc.collect()
    assert made and [ref for ref in made if ref() is not None] == []
