"""Active checks of the nodes in the routing table: the backend's waiting gauges for load-aware
routing, and probes that bring an ejected endpoint back once its model answers ready again."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import GatewayMetrics
from gateway.routing.balancer import Balancer
from gateway.routing.table import Endpoint, RoutingTable

log = logging.getLogger("gateway.nodes")
WAITING_METRIC = "llm_waiting_requests"
PROBE_TIMEOUT_S = 2.0


def waiting_by_model(metrics_text: str) -> dict[str, float]:
    """The backend's waiting requests per Triton model (summed over versions and levels)."""
    totals: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(metrics_text):
        if family.name != WAITING_METRIC:
            continue
        for sample in family.samples:
            totals[sample.labels.get("model", "")] += sample.value
    return dict(totals)


class NodeMonitor:
    def __init__(self, balancer: Balancer, metrics: GatewayMetrics,
                 table: Callable[[], RoutingTable], interval_s: float) -> None:
        self.balancer = balancer
        self.metrics = metrics
        self.table = table
        self.interval_s = interval_s
        self._client = httpx.AsyncClient(timeout=PROBE_TIMEOUT_S)

    async def run(self) -> None:
        while True:
            try:
                await self.check_all()
            except asyncio.CancelledError:
                raise
            except Exception:  # the loop never dies
                log.exception("node check failed")
            await asyncio.sleep(self.interval_s)

    async def check_all(self) -> None:
        by_node: dict[str, list[Endpoint]] = defaultdict(list)
        for endpoint in self.table().endpoints():
            by_node[endpoint.http_url].append(endpoint)
        await asyncio.gather(*(self.check_node(endpoints) for endpoints in by_node.values()))

    async def check_node(self, endpoints: list[Endpoint]) -> None:
        now = time.monotonic()
        for endpoint in endpoints:
            if self.balancer.due_for_probe(endpoint, now):
                await self.probe(endpoint)
        live = [e for e in endpoints if not self.balancer.state(e).ejected(time.monotonic())]
        metrics_url = next((e.metrics_url for e in live if e.metrics_url), None)
        if not live or metrics_url is None:
            return
        try:
            response = await self._client.get(metrics_url)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            for endpoint in live:
                self.eject(endpoint, f"metrics unreadable: {type(exc).__name__}: {exc}")
            return
        waiting = waiting_by_model(response.text)
        for endpoint in live:
            self.balancer.state(endpoint).waiting = waiting.get(endpoint.triton_model, 0.0)

    async def probe(self, endpoint: Endpoint) -> None:
        try:
            response = await self._client.get(
                f"http://{endpoint.http_url}/v2/models/{endpoint.triton_model}/ready")
            ready = response.status_code == 200
            detail = f"model ready answered {response.status_code}"
        except httpx.HTTPError as exc:
            ready, detail = False, f"{type(exc).__name__}: {exc}"
        if ready:
            log.info("node %s serves %s: in rotation", endpoint.node, endpoint.triton_model)
            self.balancer.recovered(endpoint)
        else:
            self.eject(endpoint, detail)

    def eject(self, endpoint: Endpoint, error: str) -> None:
        if self.balancer.failed(endpoint, time.monotonic(), error):
            log.warning("node %s ejected for %s: %s", endpoint.node, endpoint.triton_model, error)
            self.metrics.node_ejections.labels(endpoint.node, endpoint.triton_model).inc()

    async def close(self) -> None:
        await self._client.aclose()
