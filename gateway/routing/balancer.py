"""Choosing a node for a request: by load (the gateway's own outstanding requests plus the
backend's waiting gauge), skipping nodes ejected after a failure until a probe brings them back.

Pure: time comes in as an argument, so the ejection backoff tests without sleeping.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.routing.table import Endpoint
from gateway.settings import RoutingPolicy


@dataclass
class NodeState:
    """What the gateway knows of one model on one node (an endpoint)."""

    outstanding: int = 0
    # The backend's waiting requests for this model there, from the node's /metrics.
    waiting: float = 0.0
    ejected_until: float = 0.0
    failures: int = 0
    last_error: str = ""
    # False until a probe found the model ready there: an endpoint that (re)appears in the table
    # may be a node still loading it after a restart.
    verified: bool = True

    def ejected(self, now: float) -> bool:
        return not self.verified or (self.failures > 0 and now < self.ejected_until)


class Balancer:
    """Per-node state and the choice between nodes; one instance per gateway process."""

    def __init__(self, policy: RoutingPolicy, ejection_base_s: float, ejection_max_s: float,
                 rng: random.Random | None = None) -> None:
        self.policy = policy
        self.ejection_base_s = ejection_base_s
        self.ejection_max_s = ejection_max_s
        self.nodes: dict[Endpoint, NodeState] = {}
        self._turn = itertools.count()
        self._rng = rng or random.Random()

    def state(self, endpoint: Endpoint) -> NodeState:
        return self.nodes.setdefault(endpoint, NodeState())

    def pick(self, endpoints: Iterable[Endpoint], now: float,
             exclude: frozenset[str] = frozenset()) -> Endpoint | None:
        """A node to send to, or None when every one is ejected or excluded.

        When all remaining nodes are ejected, the one whose ejection ends first is tried rather
        than refusing: an ejection is a guess, and a request that has nowhere else to go loses
        nothing by testing it.
        """
        candidates = [e for e in endpoints if e.http_url not in exclude]
        if not candidates:
            return None
        healthy = [e for e in candidates if not self.state(e).ejected(now)]
        if not healthy:
            return min(candidates, key=lambda e: self.state(e).ejected_until)
        if self.policy is RoutingPolicy.ROUND_ROBIN:
            return healthy[next(self._turn) % len(healthy)]
        loads = {e: self.load(e) for e in healthy}
        lightest = min(loads.values())
        return self._rng.choice([e for e in healthy if loads[e] == lightest])

    def load(self, endpoint: Endpoint) -> float:
        state = self.state(endpoint)
        return state.outstanding + state.waiting

    def started(self, endpoint: Endpoint) -> None:
        self.state(endpoint).outstanding += 1

    def finished(self, endpoint: Endpoint) -> None:
        state = self.state(endpoint)
        state.outstanding = max(0, state.outstanding - 1)

    def failed(self, endpoint: Endpoint, now: float, error: str) -> bool:
        """Eject the node with exponential backoff; True when it was in rotation before."""
        state = self.state(endpoint)
        newly = state.failures == 0 and state.verified
        state.failures += 1
        delay = min(self.ejection_max_s, self.ejection_base_s * 2 ** (state.failures - 1))
        state.ejected_until = now + delay
        state.last_error = error
        state.waiting = 0.0
        return newly

    def recovered(self, endpoint: Endpoint) -> None:
        state = self.state(endpoint)
        state.verified = True
        state.failures = 0
        state.ejected_until = 0.0
        state.last_error = ""

    def due_for_probe(self, endpoint: Endpoint, now: float) -> bool:
        state = self.state(endpoint)
        return (not state.verified or state.failures > 0) and now >= state.ejected_until

    def on_probation(self, endpoint: Endpoint) -> None:
        """A new endpoint: out of rotation until its first probe finds the model ready."""
        self.nodes[endpoint] = NodeState(verified=False)

    def update(self, endpoints: set[Endpoint]) -> None:
        """Follow a new routing table: endpoints new to it go on probation, and those it no
        longer names are forgotten (once nothing is in flight there)."""
        for endpoint in endpoints - self.nodes.keys():
            self.on_probation(endpoint)
        for endpoint in list(self.nodes):
            if endpoint not in endpoints and self.nodes[endpoint].outstanding == 0:
                del self.nodes[endpoint]
