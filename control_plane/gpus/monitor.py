"""Polls every node's GPU inventory on a timer and keeps each node's recent readings.

Nodes are read concurrently under one deadline per poll, so a slow or failing node delays and
stops no other; its error is recorded in place of its readings.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime

from control_plane.gpus.readings import GpuInventory, GpuReading, InventoryUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeReadings:
    """One node's GPUs at one poll, or why they could not be read (``error``; ``gpus`` empty)."""

    node: str
    taken_at: datetime
    gpus: tuple[GpuReading, ...]
    error: str | None = None


class GpuMonitor:
    """Reads ``inventories()`` every ``interval_s`` on a daemon thread; keeps ``history`` polls."""

    def __init__(self, inventories: Callable[[], Mapping[str, GpuInventory]],
                 interval_s: float = 5.0, history: int = 120,
                 clock: Callable[[], float] = time.time, node_timeout_s: float | None = None,
                 max_workers: int = 8) -> None:
        if interval_s <= 0 or history < 1:
            raise ValueError(f"GpuMonitor needs interval_s > 0 and history >= 1, got "
                             f"interval_s={interval_s} and history={history}")
        self._inventories = inventories
        self.interval_s = interval_s
        # A poll waits this long for the slowest node, so polls keep to their interval.
        self.node_timeout_s = interval_s if node_timeout_s is None else node_timeout_s
        self._history_size = history
        self._clock = clock
        self._max_workers = max_workers
        self._lock = threading.Lock()
        self._history: dict[str, deque[NodeReadings]] = {}
        # A node whose read outlived its poll is not read again until that read returns, so a
        # hung node holds one worker, not one more per poll.
        self._in_flight: dict[str, Future[NodeReadings]] = {}
        self._poll_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self) -> dict[str, NodeReadings]:
        """Read every node now and record the result; returns what this poll recorded."""
        with self._poll_lock:
            return self._poll()

    def _poll(self) -> dict[str, NodeReadings]:
        inventories = dict(self._inventories())
        executor = self._executor_started()
        started: dict[str, Future[NodeReadings]] = {}
        busy: list[str] = []
        for node, inventory in inventories.items():
            previous = self._in_flight.get(node)
            if previous is not None and not previous.done():
                busy.append(node)
            else:
                started[node] = self._in_flight[node] = executor.submit(
                    self._read, node, inventory)
        wait(started.values(), timeout=self.node_timeout_s)
        recorded = {node: self._outcome(node, future) for node, future in started.items()}
        for node in busy:
            recorded[node] = self._failure(
                node, f"the previous read has not returned after more than "
                      f"{self.node_timeout_s:g} s; the node is not read again until it does")
        with self._lock:
            for node in set(self._history) - set(inventories):
                del self._history[node]  # the node left the fleet
            for node, readings in recorded.items():
                self._history.setdefault(node, deque(maxlen=self._history_size)).append(readings)
        for node in set(self._in_flight) - set(inventories):
            if self._in_flight[node].done():
                del self._in_flight[node]
        return recorded

    def latest(self, node: str) -> NodeReadings | None:
        """The node's most recent poll, or None if it was never polled or has left the fleet."""
        with self._lock:
            polls = self._history.get(node)
            return polls[-1] if polls else None

    def latest_all(self) -> dict[str, NodeReadings]:
        """Every current node's most recent poll."""
        with self._lock:
            return {node: polls[-1] for node, polls in self._history.items() if polls}

    def history(self, node: str) -> list[NodeReadings]:
        """The node's recent polls, oldest first; at most ``history`` of them."""
        with self._lock:
            return list(self._history.get(node, ()))

    def start(self) -> None:
        """Poll now and then every ``interval_s`` on a daemon thread, until ``stop()``."""
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError("GpuMonitor is already running; call stop() before start()")
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="gpu-monitor", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop polling; reads still in progress are abandoned, not waited for."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
            self._in_flight.clear()

    def _run(self) -> None:
        while not self._stopping.is_set():
            began = time.monotonic()
            try:
                self.poll_once()
            except Exception:  # the loop outlives any one poll: a failing `inventories()` too
                log.exception("GPU poll failed; polling again in %.1f s", self.interval_s)
            self._stopping.wait(max(0.0, self.interval_s - (time.monotonic() - began)))

    def _executor_started(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self._max_workers,
                                                thread_name_prefix="gpu-poll")
        return self._executor

    def _read(self, node: str, inventory: GpuInventory) -> NodeReadings:
        try:
            gpus = tuple(inventory.snapshot())
        except InventoryUnavailable as error:
            log.warning("GPU inventory of node %s is unavailable: %s", node, error)
            return self._failure(node, f"InventoryUnavailable: {error}")
        except Exception as error:  # a broken inventory fails its node only
            log.exception("GPU inventory of node %s failed", node)
            return self._failure(node, f"{type(error).__name__}: {error}")
        return NodeReadings(node, self._now(), gpus)

    def _outcome(self, node: str, future: Future[NodeReadings]) -> NodeReadings:
        if future.done():
            return future.result()
        return self._failure(node, f"no answer within {self.node_timeout_s:g} s")

    def _failure(self, node: str, error: str) -> NodeReadings:
        return NodeReadings(node, self._now(), (), error)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), tz=UTC)
