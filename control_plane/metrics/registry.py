"""The control plane's event metrics, on a registry of its own (served at ``/metrics``).

One registry per application rather than prometheus_client's global one: tests and embedders
create several applications in one process, and each counts only its own work.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)

# Every counter and histogram would also export a ``*_created`` series (its creation time) that no
# dashboard or alert reads; it doubled what a scrape carries. Process-wide in prometheus_client.
disable_created_metrics()  # type: ignore[no-untyped-call]

# Operations span a metadata write (milliseconds) and a large model's load (many minutes).
OPERATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
# A reconcile pass reads every node's index; a load it starts runs in the pass.
RECONCILE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class ControlPlaneMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.operations = Counter(
            "llmcp_operations", "Operations ended, by kind and outcome (succeeded, failed, "
            "interrupted: left unfinished by a process that stopped)", ["kind", "outcome"],
            registry=r)
        self.operation_duration = Histogram(
            "llmcp_operation_duration_seconds", "From an operation's start to its end, by kind "
            "and outcome", ["kind", "outcome"], buckets=OPERATION_BUCKETS, registry=r)
        self.promotions = Counter(
            "llmcp_promotions", "Promotions ended, by outcome (succeeded, failed)",
            ["outcome"], registry=r)
        self.gate_checks = Counter(
            "llmcp_promotion_gate_checks", "Promotion gate checks, by kind (smoke, compare), "
            "phase and result (passed, failed, skipped)", ["kind", "phase", "result"],
            registry=r)
        self.reconcile_passes = Counter(
            "llmcp_reconcile_passes", "Reconcile passes completed by this process (the leader)",
            registry=r)
        self.reconcile_duration = Histogram(
            "llmcp_reconcile_pass_duration_seconds", "One reconcile pass over every node",
            buckets=RECONCILE_BUCKETS, registry=r)
        self.reconcile_failures = Counter(
            "llmcp_reconcile_pass_failures", "Reconcile passes that failed as a whole (the "
            "database unreachable, a bug); the loop tries again", registry=r)
        self.reconcile_errors = Counter(
            "llmcp_reconcile_errors", "Errors a reconcile pass met on a node (unreachable, a "
            "load or unload that failed)", ["node"], registry=r)
        self.node_reachable = Gauge(
            "llmcp_node_reachable", "1 if the node's repository API answered the last reconcile "
            "pass, 0 if not", ["node"], registry=r)
        self.placement_refusals = Counter(
            "llmcp_placement_refusals", "Loads refused by placement, by each rule that failed on "
            "some GPU (one refusal can count under several rules)", ["rule"], registry=r)
        self.autoscaler_decisions = Counter(
            "llmcp_autoscaler_decisions", "Autoscaler decisions by model, alias and action "
            "(scale_up, scale_down, hold); each one is recorded with its inputs and reason",
            ["model", "alias", "action"], registry=r)
        self.autoscaler_engines = Gauge(
            "llmcp_autoscaler_engines", "Engines serving or loading the alias at the last "
            "decision", ["model", "alias"], registry=r)
        self.autoscaler_desired = Gauge(
            "llmcp_autoscaler_desired_engines", "Engines the last decision asked for",
            ["model", "alias"], registry=r)
        self.gpu_evacuations = Gauge(
            "llmcp_gpu_evacuations", "Deployments on a faulty GPU at the last reconcile pass: "
            "moving (a replacement on another node is loading or serving) or no_capacity (no "
            "other node has healthy room)", ["state"], registry=r)
        self.webhook_deliveries = Counter(
            "llmcp_webhook_deliveries", "Webhook delivery attempts, by outcome (delivered, "
            "retrying, exhausted: no attempt left)", ["outcome"], registry=r)
