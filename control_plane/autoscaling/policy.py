"""What an alias scales on, between which bounds, and how quickly it may change."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum


class ScalingMetric(StrEnum):
    # Requests waiting in the backends' queues, per engine serving the alias.
    WAITING_PER_ENGINE = "waiting_per_engine"
    # p95 of the time requests wait in vLLM's scheduler, over the readings' window.
    QUEUE_TIME_P95 = "queue_time_p95_seconds"
    # p95 of the time to first token at the backend.
    TTFT_P95 = "ttft_p95_seconds"


@dataclass(frozen=True)
class ScalingPolicy:
    """``min_engines`` .. ``max_engines`` engines (deployments of the alias, one per node), kept
    near ``target`` of ``metric``. A change needs the metric past the target for the whole
    scale-up (or the longer scale-down) window, and waits ``cooldown_s`` after the last one."""

    min_engines: int
    max_engines: int
    metric: ScalingMetric
    target: float
    scale_up_window_s: float = 60.0
    scale_down_window_s: float = 300.0
    cooldown_s: float = 120.0
    # Within this share of the target nothing changes (Kubernetes' HPA uses the same 10 %).
    tolerance: float = 0.1

    def recommended(self, engines: int, value: float) -> int:
        """Engines that would bring ``value`` to the target, for a reading taken when
        ``engines`` served (a latency is taken to fall in proportion to the engines added)."""
        if engines <= 0:
            return 1 if value > 0 else 0
        ratio = value / self.target
        if abs(ratio - 1) <= self.tolerance:
            return engines
        return max(0, math.ceil(engines * ratio))
