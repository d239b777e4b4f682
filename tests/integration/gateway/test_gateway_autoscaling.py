"""Autoscaling end to end with CPU engines of the real model, on the shared gateway stack's
production alias (two engines, one per node): under light traffic an engine is drained and
removed after the scale-down window; a load that builds a queue on the one left adds an engine
back, after which the queue per engine falls; no request fails throughout. The stack ends as it
began: two engines, the policy gone."""

from __future__ import annotations

from typing import Any

from tests.integration.gateway.conftest import (
    MODEL,
    Load,
    Stack,
    node_serves,
    nodes_report,
)
from tests.integration.gateway.conftest import production_engines as engines
from tests.integration.support import metric, wait_until

POLICY = {"min_engines": 1, "max_engines": 2, "metric": "waiting_per_engine", "target": 2,
          "scale_up_window_s": 4, "scale_down_window_s": 10, "cooldown_s": 5}
SCALING = f"/api/v1/models/{MODEL}/aliases/production/scaling"
PROMPT = "Count from one to a hundred:"


def waiting_per_engine(stack: Stack) -> float:
    ready = [node for node, state in engines(stack).items() if state == "READY"]
    waiting = sum(metric(stack.nodes[node], "llm_waiting_requests", model=MODEL)
                  for node in ready)
    return waiting / max(1, len(ready))


def decisions(stack: Stack) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = stack.admin.get(f"{SCALING}/decisions",
                                                  params={"limit": 200}).json()["items"]
    return items


def adding(stack: Stack, decision: dict[str, Any]) -> str:
    """Why an added engine is not ready: the deployments, the operation, the node's log."""
    operation = stack.admin.get(f"/api/v1/operations/{decision['operation_id']}").json()
    return (f"engines {engines(stack)}; operation {operation}\n"
            + nodes_report(stack, [decision["node"]]))


def test_an_idle_engine_is_drained_and_a_queue_adds_one_back(stack: Stack) -> None:
    assert wait_until(lambda: len([s for s in engines(stack).values() if s == "READY"]) == 2,
                      300, interval=1), engines(stack)
    assert stack.admin.put(SCALING, json=POLICY).status_code == 201
    try:
        # Light traffic (about nothing waiting against a target of two) for the 10 s window:
        # one engine is drained and removed while requests keep coming; never the last (min 1).
        with Load(stack, clients=1, max_tokens=8, prompt=PROMPT) as light:
            assert wait_until(lambda: len(engines(stack)) == 1, 120, interval=1), \
                decisions(stack)[:3]
            removed = next(d for d in decisions(stack) if d["action"] == "scale_down")
            assert "stayed below 2" in removed["reason"] and removed["operation_id"], removed
            [kept] = engines(stack)
            assert wait_until(lambda: not node_serves(stack, removed["node"]), 120, interval=1)
        assert light.failures == [] and light.ok > 0, light.failures[:3]

        # Twelve clients against the engine's three slots: a queue of about nine for the 4 s
        # window adds an engine back, on the free node (the one just left: no waiting period).
        with Load(stack, clients=12, max_tokens=24, prompt=PROMPT) as heavy:
            assert wait_until(lambda: len(engines(stack)) == 2, 180, interval=1), \
                decisions(stack)[:3]
            queued_on_one = waiting_per_engine(stack)
            added = next(d for d in decisions(stack) if d["action"] == "scale_up")
            assert "stayed above 2" in added["reason"] and added["node"] == removed["node"]
            assert queued_on_one > POLICY["target"], queued_on_one
            # A load takes 30-100 s here; 420 s leaves this test's 600 s time for the rest and
            # for saying, if it never ends, what the operation and the node were doing.
            assert wait_until(lambda: set(engines(stack).values()) == {"READY"}, 420,
                              interval=1), adding(stack, added)
            assert wait_until(lambda: node_serves(stack, added["node"]), 120, interval=1)
            # The gateway spreads the clients over both engines: the queue per engine falls.
            assert wait_until(lambda: waiting_per_engine(stack) < queued_on_one, 120,
                              interval=1), (queued_on_one, waiting_per_engine(stack))
            # Before the load stops: the stack keeps both engines for the tests after this one.
            assert stack.admin.delete(SCALING).status_code == 204
        assert heavy.failures == [] and heavy.ok > 0, heavy.failures[:3]
        print(f"[autoscale] drained {removed['node']} under {light.ok} requests, added it back "
              f"for a queue of {queued_on_one:.1f}; {heavy.ok} requests, none failed")
        assert kept in engines(stack)
    finally:
        stack.admin.delete(SCALING)
        for node in stack.nodes:
            if node not in engines(stack):
                stack.admin.put(f"/api/v1/models/{MODEL}/aliases/production/deployments/{node}")
    assert wait_until(lambda: all(node_serves(stack, node) for node in stack.nodes), 600,
                      interval=1)
