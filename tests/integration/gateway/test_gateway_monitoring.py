"""The shipped alerting rules and Grafana dashboards read metrics that exist: every expression
parses as PromQL (Prometheus's own grammar, through promql-parser), and every metric it selects,
with every label it matches on, is in what the control plane, the gateway and a node of the shared
stack export after the other gateway tests' traffic."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import promql_parser
import yaml
from prometheus_client.parser import text_string_to_metric_families

from control_plane.triton.runtime import PROJECT_ROOT
from tests.integration.gateway.conftest import Stack

MONITORING = PROJECT_ROOT / "monitoring"
DASHBOARDS = sorted((MONITORING / "grafana").glob("*.json"))
RULES = MONITORING / "prometheus" / "alerts.yml"
# The series Prometheus writes for a family of each type, beside the samples seen.
SERIES_OF_TYPE = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                  "summary": ("", "_sum", "_count"), "gauge": ("",), "unknown": ("",)}


def selectors(expr: promql_parser.Expr) -> Iterator[promql_parser.VectorSelector]:
    """Every vector selector in an expression's syntax tree."""
    if isinstance(expr, promql_parser.VectorSelector):
        yield expr
    elif isinstance(expr, promql_parser.MatrixSelector):
        yield expr.vector_selector
    elif isinstance(expr, promql_parser.BinaryExpr):
        yield from selectors(expr.lhs)
        yield from selectors(expr.rhs)
    elif isinstance(expr, promql_parser.AggregateExpr):
        yield from selectors(expr.expr)
        if expr.param is not None:
            yield from selectors(expr.param)
    elif isinstance(expr, promql_parser.Call):
        for argument in expr.args:
            yield from selectors(argument)
    elif isinstance(expr, promql_parser.ParenExpr | promql_parser.UnaryExpr |
                    promql_parser.SubqueryExpr):
        yield from selectors(expr.expr)


def queries() -> list[tuple[str, str]]:
    """(where, expression) for every alert and every dashboard target."""
    found = [(f"alerts.yml {rule['alert']}", rule["expr"])
             for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text())["panels"]:
            found += [(f"{path.name} '{panel['title']}'", target["expr"])
                      for target in panel["targets"]]
    return found


def exported(urls: list[str]) -> dict[str, set[str]]:
    """Series name -> the label names its samples carry, over every scrape."""
    series: dict[str, set[str]] = {}
    for url in urls:
        response = httpx.get(url, timeout=10)
        response.raise_for_status()
        for family in text_string_to_metric_families(response.text):
            for suffix in SERIES_OF_TYPE.get(family.type, ("",)):
                series.setdefault(family.name + suffix, set())
            for sample in family.samples:
                series.setdefault(sample.name, set()).update(sample.labels)
    return series


def test_alerts_and_dashboards_are_well_formed() -> None:
    assert {path.stem for path in DASHBOARDS} == {"control-plane", "gateway", "nodes"}
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in ("critical", "warning"), rule
            assert rule["annotations"]["summary"], rule
    uids = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        uids.append(board["uid"])
        assert board["panels"], path
        for panel in board["panels"]:
            assert panel["datasource"]["uid"] == "${datasource}", (path, panel["title"])
            assert panel["targets"] and all(t["refId"] and t["expr"] for t in panel["targets"])
    assert len(set(uids)) == len(uids)


def test_every_metric_the_alerts_and_dashboards_read_exists_in_a_live_run(stack: Stack) -> None:
    node = next(iter(stack.nodes.values()))
    series = exported([f"{stack.control_plane.url}/metrics", f"{stack.http}/metrics",
                       node.metrics_url])
    missing: list[str] = []
    for where, expression in queries():
        parsed = promql_parser.parse(expression)  # raises on anything Prometheus would refuse
        for selector in selectors(parsed):
            name = selector.name
            if name not in series:
                missing.append(f"{where}: {name}")
                continue
            labels = {m.name for m in selector.matchers.matchers} - {"__name__"}
            # A family without samples yet (no refusal so far) declares no labels to check.
            if series[name] and not labels <= series[name]:
                missing.append(f"{where}: {name} has no label {sorted(labels - series[name])}")
    assert not missing, "\n".join(missing)
