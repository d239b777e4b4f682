"""Gauges of what the control plane holds, computed at each scrape: deployments by state, each
GPU's memory (total and used from the monitor's last reading, booked from the reservations) and
health, and whether this process leads. Read when asked, so no value can go stale between a
change and the gauge that should follow it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction
from control_plane.deployments.orm import DeploymentState
from control_plane.deployments.repository import DeploymentRepository
from control_plane.gpus.monitor import GpuMonitor
from control_plane.gpus.readings import GpuHealth
from control_plane.reservations.repository import ReservationRepository

log = logging.getLogger(__name__)


class StateCollector(Collector):
    def __init__(self, session_factory: sessionmaker[Session], gpu_monitor: GpuMonitor,
                 is_leader: Callable[[], bool | None]) -> None:
        """``is_leader``: None where this process does not contend (reconciler disabled)."""
        self.session_factory = session_factory
        self.gpu_monitor = gpu_monitor
        self.is_leader = is_leader

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("llmcp_state_readable", "1 if the last scrape could read the "
                               "database (the gauges of deployments and bookings come from it)")
        try:
            with transaction(self.session_factory, read_only=True) as session:
                by_state = DeploymentRepository(session).count_by_state()
                booked = ReservationRepository(session).booked_by_gpu()
        except SQLAlchemyError as exc:  # a scrape must answer even with the database away
            log.warning("metrics: cannot read the database: %s", exc)
            up.add_metric([], 0)
            yield up
            yield from self._leader()
            return
        up.add_metric([], 1)
        yield up
        deployments = GaugeMetricFamily("llmcp_deployments", "Deployments by state",
                                        labels=["state"])
        for state in DeploymentState:
            deployments.add_metric([state.value], by_state.get(state.value, 0))
        yield deployments
        yield from self._gpus(booked)
        yield from self._leader()

    def _gpus(self, booked: dict[tuple[str, str], int]) -> Iterator[Metric]:
        labels = ["node", "gpu", "uuid"]
        total = GaugeMetricFamily("llmcp_gpu_memory_total_bytes", "A GPU's memory, from the "
                                  "last reading", labels=labels)
        used = GaugeMetricFamily("llmcp_gpu_memory_used_bytes", "A GPU's used memory, from the "
                                 "last reading", labels=labels)
        reserved = GaugeMetricFamily("llmcp_gpu_memory_booked_bytes", "Memory booked on a GPU "
                                     "by placement for the engines loaded or loading there",
                                     labels=labels)
        healthy = GaugeMetricFamily("llmcp_gpu_healthy", "1 if the GPU's last reading was "
                                    "healthy; 0 if it reported a fault or was lost",
                                    labels=[*labels, "health"])
        readable = GaugeMetricFamily("llmcp_node_gpu_inventory_up", "1 if the node's GPU "
                                     "inventory answered the last poll", labels=["node"])
        seen: set[tuple[str, str]] = set()
        for node, readings in sorted(self.gpu_monitor.latest_all().items()):
            readable.add_metric([node], 0 if readings.error else 1)
            for gpu in readings.gpus:
                values = [node, str(gpu.index), gpu.uuid]
                seen.add((node, gpu.uuid))
                if gpu.memory_total_bytes is not None:
                    total.add_metric(values, gpu.memory_total_bytes)
                if gpu.memory_used_bytes is not None:
                    used.add_metric(values, gpu.memory_used_bytes)
                reserved.add_metric(values, booked.get((node, gpu.uuid), 0))
                healthy.add_metric([*values, gpu.health.value],
                                   1 if gpu.health is GpuHealth.OK else 0)
        # Bookings on a GPU no reading names (its node unreadable now) still count.
        for (node, uuid), value in sorted(booked.items()):
            if (node, uuid) not in seen:
                reserved.add_metric([node, "", uuid], value)
        yield from (total, used, reserved, healthy, readable)

    def _leader(self) -> Iterator[Metric]:
        leading = self.is_leader()
        if leading is None:
            return
        leader = GaugeMetricFamily("llmcp_leader", "1 while this process holds the reconciler "
                                   "lock (it alone reconciles); 0 on the others")
        leader.add_metric([], 1 if leading else 0)
        yield leader
