"""The routing table, the balancer's choice and ejection backoff: pure, no I/O."""

from __future__ import annotations

import random

import pytest

from gateway.routing.balancer import Balancer
from gateway.routing.monitor import waiting_by_model
from gateway.routing.table import OverLimit, parse_table
from gateway.settings import RoutingPolicy

DOCUMENT = {
    "revision": "abc",
    "models": [{"name": "m", "model": "m", "alias": "production", "version": 2,
                "max_model_len": 100,
                "endpoints": [
                    {"node": "a", "http_url": "h:1", "grpc_url": "h:2", "triton_model": "m"},
                    {"node": "b", "http_url": "h:3", "grpc_url": "h:4", "triton_model": "m",
                     "metrics_url": "http://h:5/metrics"}]}],
    "tenants": [{"name": "t", "enabled": True, "allowed_models": ["m"],
                 "max_priority_level": 2, "default_priority_level": 3,
                 "priority_over_limit": "lower", "key_hashes": ["k1", "k2"]}],
}


def balancer(policy: RoutingPolicy = RoutingPolicy.LEAST_LOADED) -> Balancer:
    return Balancer(policy, ejection_base_s=1.0, ejection_max_s=8.0, rng=random.Random(0))


def test_table_parses_routes_tenants_and_keys() -> None:
    table = parse_table(DOCUMENT)
    route = table.route("m")
    assert route is not None and [e.node for e in route.endpoints] == ["a", "b"]
    assert table.route("m.production") is route
    assert table.route("m.canary") is None
    tenant = table.tenants["t"]
    assert tenant.priority_over_limit is OverLimit.LOWER and tenant.may_use(route)
    assert table.tenant_by_key_hash == {"k1": "t", "k2": "t"}


def test_malformed_table_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="malformed routing table"):
        parse_table({"revision": "x", "models": [{"name": "m"}]})


def test_least_loaded_picks_the_node_with_fewest_outstanding_plus_waiting() -> None:
    route = parse_table(DOCUMENT).route("m")
    assert route is not None
    a, b = route.endpoints
    chooser = balancer()
    chooser.started(a)
    assert chooser.pick(route.endpoints, now=0) == b
    chooser.state(b).waiting = 3
    assert chooser.pick(route.endpoints, now=0) == a
    chooser.finished(a)
    chooser.state(b).waiting = 0
    picks = {chooser.pick(route.endpoints, now=0) for _ in range(50)}
    assert picks == {a, b}, "equal loads are shared, not always the first node"


def test_round_robin_alternates_whatever_the_load() -> None:
    route = parse_table(DOCUMENT).route("m")
    assert route is not None
    chooser = balancer(RoutingPolicy.ROUND_ROBIN)
    chooser.state(route.endpoints[0]).waiting = 100
    assert [chooser.pick(route.endpoints, now=0).node for _ in range(4)] == ["a", "b", "a", "b"]


def test_a_failed_node_is_ejected_with_doubling_backoff_and_recovers() -> None:
    route = parse_table(DOCUMENT).route("m")
    assert route is not None
    a, b = route.endpoints
    chooser = balancer()
    assert chooser.failed(a, now=10, error="refused") is True
    assert all(chooser.pick(route.endpoints, now=10.5) == b for _ in range(10))
    assert not chooser.due_for_probe(a, now=10.5) and chooser.due_for_probe(a, now=11)
    assert chooser.failed(a, now=11, error="refused") is False, "still the same outage"
    assert chooser.state(a).ejected_until == 13  # 1 s, then 2 s
    for _ in range(5):
        chooser.failed(a, now=20, error="refused")
    assert chooser.state(a).ejected_until == 28  # capped at ejection_max_s
    chooser.recovered(a)
    assert not chooser.state(a).ejected(20)


def test_an_endpoint_new_to_the_table_serves_only_after_a_probe() -> None:
    route = parse_table(DOCUMENT).route("m")
    assert route is not None
    a, b = route.endpoints
    chooser = balancer()
    chooser.update({a})
    chooser.recovered(a)
    chooser.update({a, b})  # b (re)appears: perhaps a restarted node still loading the model
    assert chooser.due_for_probe(b, now=0) and not chooser.due_for_probe(a, now=0)
    assert all(chooser.pick(route.endpoints, now=0) == a for _ in range(10))
    chooser.failed(b, now=0, error="model ready answered 400")
    assert chooser.state(b).ejected(now=5), "a failed probe keeps it out"
    chooser.recovered(b)
    assert {chooser.pick(route.endpoints, now=5) for _ in range(50)} == {a, b}
    chooser.update({b})
    assert set(chooser.nodes) == {b}, "endpoints the table dropped are forgotten"


def test_when_every_node_is_ejected_the_soonest_back_is_tried_and_excluded_ones_never() -> None:
    route = parse_table(DOCUMENT).route("m")
    assert route is not None
    a, b = route.endpoints
    chooser = balancer()
    chooser.failed(a, now=0, error="x")
    chooser.failed(b, now=0, error="x")
    chooser.failed(b, now=0, error="x")
    assert chooser.pick(route.endpoints, now=0.1) == a
    assert chooser.pick(route.endpoints, now=0.1, exclude=frozenset({"h:1"})) == b
    assert chooser.pick(route.endpoints, now=0.1, exclude=frozenset({"h:1", "h:3"})) is None


def test_waiting_gauge_is_summed_per_model_from_prometheus_text() -> None:
    text = """# HELP llm_waiting_requests Requests waiting
# TYPE llm_waiting_requests gauge
llm_waiting_requests{model="m",version="1",priority="1"} 2
llm_waiting_requests{model="m",version="1",priority="3"} 5
llm_waiting_requests{model="other",version="1",priority="3"} 1
nv_inference_count{model="m",version="1"} 9
"""
    assert waiting_by_model(text) == {"m": 7.0, "other": 1.0}
