"""Reads every node's ``/metrics`` on an interval and keeps a window of readings per node, so a
statistics request answers from memory instead of waiting out its window."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

import httpx

from control_plane.stats.readings import NodeReading, parse_reading

log = logging.getLogger(__name__)


class NodeMetricsPoller:
    def __init__(self, metrics_urls: Callable[[], Mapping[str, str]], interval_s: float,
                 keep_s: float, timeout_s: float = 5.0,
                 clock: Callable[[], float] = time.time) -> None:
        """``metrics_urls()``: node name -> its metrics URL, asked again at each poll (nodes come
        and go); readings older than ``keep_s`` are dropped."""
        self._metrics_urls = metrics_urls
        self.interval_s = interval_s
        self.keep_s = keep_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._readings: dict[str, deque[NodeReading]] = {}
        self._errors: dict[str, str] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: httpx.Client | None = None

    def poll_once(self) -> None:
        urls = dict(self._metrics_urls())
        outcomes: dict[str, NodeReading | str] = {}
        if urls:
            client = self._http_client()
            with ThreadPoolExecutor(max_workers=min(8, len(urls))) as pool:
                outcomes = dict(zip(urls, pool.map(lambda url: self._read(client, url),
                                                   urls.values()), strict=True))
        with self._lock:
            for node in set(self._readings) - set(urls):
                del self._readings[node]
                self._errors.pop(node, None)
            for node, outcome in outcomes.items():
                if isinstance(outcome, str):
                    self._errors[node] = outcome
                    continue
                self._errors.pop(node, None)
                kept = self._readings.setdefault(node, deque())
                kept.append(outcome)
                while kept and kept[0].taken_at < outcome.taken_at - self.keep_s:
                    kept.popleft()

    def _http_client(self) -> httpx.Client:
        # One client for every poll: a new one per poll built a TLS context each second (~1 % of
        # an API worker's CPU under load, py-spy) and kept no connection to a node alive.
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self._timeout_s)
            return self._client

    def _read(self, client: httpx.Client, url: str) -> NodeReading | str:
        try:
            response = client.get(url)
            response.raise_for_status()
            return parse_reading(response.text, self._clock())
        except (httpx.HTTPError, ValueError) as exc:
            return f"cannot read {url}: {type(exc).__name__}: {exc}"

    def pair(self, node: str, window_s: float) -> tuple[NodeReading, NodeReading] | str:
        """The oldest reading inside the window and the newest, or why there is no such pair."""
        with self._lock:
            kept = list(self._readings.get(node, ()))
            error = self._errors.get(node)
        if error is not None:
            return error
        if len(kept) < 2:
            return (f"fewer than two readings of node {node} yet (its metrics are read every "
                    f"{self.interval_s:g} s); ask again shortly")
        newest = kept[-1]
        inside = [k for k in kept[:-1] if k.taken_at >= newest.taken_at - window_s]
        return (inside[0] if inside else kept[-2]), newest

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="node-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _run(self) -> None:
        while not self._stopping.is_set():
            began = time.monotonic()
            try:
                self.poll_once()
            except Exception:  # the loop outlives any one poll (a database outage, a bug)
                log.exception("reading node metrics failed; again in %.1f s", self.interval_s)
            self._stopping.wait(max(0.0, self.interval_s - (time.monotonic() - began)))
