"""The shipped alerting rules and Grafana dashboards read metrics that exist: every expression
parses as PromQL (Prometheus's own grammar, through promql-parser), and every metric it selects,
with every label it matches on, is in what the control plane, the gateway and a node of the shared
stack export after the other gateway tests' traffic."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import promql_parser
import yaml

from control_plane.triton.runtime import PROJECT_ROOT
from tests.integration.gateway.conftest import MODEL, Stack

MONITORING = PROJECT_ROOT / "monitoring"
DASHBOARDS = sorted((MONITORING / "grafana").glob("*.json"))
RULES = MONITORING / "prometheus" / "alerts.yml"
LLMCTL = Path(sys.executable).parent / "llmctl"
# The series a declared family may have before its first sample (a counter with no refusal yet).
SERIES_OF_TYPE = {"counter": ("", "_total"), "histogram": ("_bucket", "_sum", "_count"),
                  "summary": ("", "_sum", "_count"), "gauge": ("",), "untyped": ("",)}
TYPE_LINE = re.compile(r"^# TYPE (\S+) (\S+)")
SAMPLE_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="')


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
    """Series name -> the label names its samples carry, over every scrape, named as Prometheus
    stores them: as each line writes them (prometheus_client's parser would add ``_total`` to
    Triton's counters, which Prometheus does not)."""
    series: dict[str, set[str]] = {}
    for url in urls:
        response = httpx.get(url, timeout=10)
        response.raise_for_status()
        for line in response.text.splitlines():
            declared = TYPE_LINE.match(line)
            if declared:
                name, kind = declared.groups()
                for suffix in SERIES_OF_TYPE.get(kind, ("",)):
                    series.setdefault(name + suffix, set())
                continue
            sample = SAMPLE_LINE.match(line)
            if sample:
                labels = set(LABEL.findall(sample.group(2) or ""))
                series.setdefault(sample.group(1), set()).update(labels)
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
    # A tenant's request on each node: the per-tenant families appear with a tenant's first.
    for _ in range(2 * len(stack.nodes)):
        answer = httpx.post(f"{stack.http}/v2/models/{MODEL}/generate", headers=stack.bearer(),
                            json={"text_input": "Hi", "parameters": {"max_tokens": 2}},
                            timeout=120)
        assert answer.status_code == 200, answer.text
    series = exported([f"{stack.control_plane.url}/metrics", f"{stack.http}/metrics",
                       *(node.metrics_url for node in stack.nodes.values())])
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


def test_stats_show_each_deployments_traffic_over_a_window(stack: Stack) -> None:
    before = time.monotonic()
    for _ in range(4):
        # Streamed: inter-token latency is measured between a stream's responses.
        answer = httpx.post(f"{stack.http}/v2/models/{MODEL}/generate_stream",
                            headers=stack.bearer(), timeout=120,
                            json={"text_input": "The capital of France is", "stream": True,
                                  "parameters": {"max_tokens": 24}})
        assert answer.status_code == 200 and "text_output" in answer.text, answer.text
    time.sleep(2.5)  # a reading after the traffic (the stack's control plane reads every 1 s)
    window = f"{int(time.monotonic() - before) + 30}s"
    found = stack.admin.get(f"/api/v1/models/{MODEL}/stats",
                            params={"alias": "production", "window": window})
    assert found.status_code == 200, found.text
    body = found.json()
    assert {d["node"] for d in body["deployments"]} == set(stack.nodes)
    assert all(d["stats"] is not None for d in body["deployments"]), body["deployments"]
    total = body["total"]
    # Rates over the window the readings span: 4 requests of 24 tokens, somewhere in it (enough
    # responses for inter-token gaps even when a loaded node sends several tokens per response).
    assert total["requests_per_second"] * total["seconds"] >= 3.5, total
    assert total["generated_tokens_per_second"] * total["seconds"] >= 4 * 24 - 0.5, total
    assert total["prompt_tokens_per_second"] > 0
    assert 0 < total["time_to_first_token_seconds"]["p50"] <= \
        total["time_to_first_token_seconds"]["p95"]
    assert total["inter_token_latency_seconds"]["p50"] > 0
    assert total["queue_time_seconds"]["p50"] is not None
    assert set(total["waiting"]) >= {"1", "2", "3"}
    assert list(body["by_version"]) == [str(stack.version)]

    token = stack.control_plane.headers["Authorization"].split()[1]
    shown = subprocess.run([str(LLMCTL), "--json", "stats", MODEL, "--window", window],
                           env={**os.environ, "LLMCP_URL": stack.control_plane.url,
                                "LLMCP_TOKEN": token},
                           capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr
    assert {d["node"] for d in json.loads(shown.stdout)["deployments"]} == set(stack.nodes)
    table = subprocess.run([str(LLMCTL), "stats", MODEL, "--window", window],
                           env={**os.environ, "LLMCP_URL": stack.control_plane.url,
                                "LLMCP_TOKEN": token, "COLUMNS": "200"},
                           capture_output=True, text=True, timeout=60, check=False)
    assert table.returncode == 0, table.stderr
    assert "TTFT MS" in table.stdout and "(total)" in table.stdout, table.stdout
