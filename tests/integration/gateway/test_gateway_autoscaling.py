"""Autoscaling end to end with CPU engines of the real model, through the shared gateway stack:
a policy on a new alias adds its first engine; a load through the gateway builds a queue and a
second engine is added on the other node, after which the queue per engine falls; the load stops
and an engine is drained and removed after the scale-down window; no request fails throughout.
Runs first among the gateway modules and leaves the stack as it found it (the alias removed)."""

from __future__ import annotations

import threading
import time
from typing import Any, Self

import httpx

from tests.control_plane.deployments.support import ENGINE_ARGS, register
from tests.integration.gateway.conftest import MODEL, Stack
from tests.integration.support import metric, wait_until

ALIAS = "scaled"
SERVED = f"{MODEL}.{ALIAS}"
POLICY = {"min_engines": 1, "max_engines": 2, "metric": "waiting_per_engine", "target": 2,
          "scale_up_window_s": 4, "scale_down_window_s": 10, "cooldown_s": 5}
SCALING = f"/api/v1/models/{MODEL}/aliases/{ALIAS}/scaling"
# Four times the engine's slots (max_num_seqs 3): a queue of about nine on one engine.
CLIENTS = 12


class Load:
    """Clients streaming one request after another to the alias through the gateway."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run) for _ in range(CLIENTS)]

    def __enter__(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            answer = httpx.post(f"{self.stack.http}/v2/models/{SERVED}/generate",
                                headers=self.stack.bearer(), timeout=600,
                                json={"text_input": "Count from one to a hundred:",
                                      "parameters": {"max_tokens": 24}})
            if answer.status_code == 200:
                self.ok += 1
            else:
                self.failures.append(f"{answer.status_code} {answer.text[:300]}")

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=600)


def engines(stack: Stack) -> list[dict[str, Any]]:
    found = stack.admin.get("/api/v1/deployments", params={"model": MODEL}).json()["items"]
    return [d for d in found if d["alias"] == ALIAS and d["wanted"]]


def ready_nodes(stack: Stack) -> set[str]:
    return {d["node"] for d in engines(stack) if d["state"] == "READY"}


def waiting_per_engine(stack: Stack) -> float:
    nodes = ready_nodes(stack)
    waiting = sum(metric(stack.nodes[name], "llm_waiting_requests", model=SERVED)
                  for name in nodes)
    return waiting / max(1, len(nodes))


def decisions(stack: Stack) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = stack.admin.get(f"{SCALING}/decisions",
                                                  params={"limit": 200}).json()["items"]
    return items


def test_a_queue_adds_an_engine_and_an_idle_alias_loses_it(stack: Stack) -> None:
    version = register(stack.admin, {}, ENGINE_ARGS, model=MODEL)
    moved = stack.admin.put(f"/api/v1/models/{MODEL}/aliases/{ALIAS}", json={"version": version})
    assert moved.status_code in (200, 201), moved.text
    assert stack.admin.put(SCALING, json=POLICY).status_code == 201
    try:
        # Below the minimum: the first engine, on a node chosen by the autoscaler.
        assert wait_until(lambda: len(ready_nodes(stack)) == 1, 600, interval=1), engines(stack)
        [first] = ready_nodes(stack)
        assert wait_until(lambda: any(n["node"] == first and not n["ejected"] for n in
                                      httpx.get(f"{stack.http}/healthz").json()["models"]
                                      .get(SERVED, [])), 60)
        with Load(stack) as load:
            # A queue of about nine per engine against a target of two, for the 4 s window.
            assert wait_until(lambda: len(engines(stack)) == 2, 120, interval=1), decisions(stack)
            queued_on_one = waiting_per_engine(stack)
            added = next(d for d in decisions(stack) if d["action"] == "scale_up"
                         and d["node"] != first)
            assert "stayed above 2" in added["reason"] and added["operation_id"], added
            assert wait_until(lambda: len(ready_nodes(stack)) == 2, 600, interval=1), \
                engines(stack)
            # The gateway spreads the clients over both engines: the queue per engine falls.
            assert wait_until(lambda: waiting_per_engine(stack) < queued_on_one, 120,
                              interval=1), (queued_on_one, waiting_per_engine(stack))
        assert load.failures == [] and load.ok > 0, load.failures[:3]
        print(f"[autoscale] {load.ok} requests, 0 failed; waiting per engine "
              f"{queued_on_one:.1f} on one engine")

        # Idle for the 10 s scale-down window (after the 5 s cooldown): one engine is drained
        # and removed, never the last (min 1).
        assert wait_until(lambda: len(engines(stack)) == 1, 120, interval=1), decisions(stack)
        removed = next(d for d in decisions(stack) if d["action"] == "scale_down")
        assert "stayed below 2" in removed["reason"], removed
        time.sleep(3 * POLICY["cooldown_s"])
        assert len(engines(stack)) == 1
        latest = decisions(stack)[0]
        assert latest["action"] == "hold" and "minimum is 1" in latest["reason"], latest
    finally:
        stack.admin.delete(SCALING)
        for deployment in engines(stack):
            stack.admin.delete(f"/api/v1/models/{MODEL}/aliases/{ALIAS}/deployments/"
                               f"{deployment['node']}")
        wait_until(lambda: not engines(stack), 300, interval=1)
