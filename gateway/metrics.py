"""The gateway's Prometheus metrics, on its own registry (served at ``/metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Time to first token spans queueing on a CPU node (seconds) and a warm GPU (milliseconds).
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "llmgw_requests", "Inference requests by protocol, model, tenant and outcome",
            ["protocol", "model", "tenant", "outcome"], registry=r)
        self.ttft = Histogram(
            "llmgw_time_to_first_token_seconds", "From request received to first response sent",
            ["protocol", "model"], buckets=TTFT_BUCKETS, registry=r)
        self.output_tokens = Counter(
            "llmgw_output_tokens", "Tokens generated (OpenAI usage; streamed events elsewhere)",
            ["protocol", "model", "tenant"], registry=r)
        self.node_picks = Counter("llmgw_node_picks", "Requests sent to a node",
                                  ["node", "model"], registry=r)
        self.node_ejections = Counter("llmgw_node_ejections", "Nodes taken out after a failure",
                                      ["node", "model"], registry=r)
        self.retries = Counter("llmgw_retries", "Requests retried on another node before their "
                               "first token", ["protocol", "model"], registry=r)
        self.body_refusals = Counter("llmgw_body_limit_refusals",
                                     "Requests refused for their size before reaching a node",
                                     ["protocol", "reason"], registry=r)
        self.control_plane_reachable = Gauge(
            "llmgw_control_plane_reachable", "1 while the last routing-table read succeeded",
            registry=r)
        self.routing_revision_age = Gauge(
            "llmgw_routing_table_age_seconds", "Seconds since the routing table was last "
            "confirmed by the control plane", registry=r)
        self.limit_refusals = Counter(
            "llmgw_limit_refusals", "Requests refused by a tenant limit",
            ["tenant", "limit"], registry=r)
        self.limit_store_up = Gauge(
            "llmgw_limit_store_up", "1 while the limit store (Redis) answers; 0: counting in "
            "memory (fail open) or refusing (fail closed)", registry=r)
        self.limit_store_up.set(1)
        self.limit_check = Histogram(
            "llmgw_limit_check_seconds", "Time spent admitting a request against its limits",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5),
            registry=r)
        self.prompt_token_fallbacks = Counter(
            "llmgw_prompt_token_fallbacks", "Prompts of token-limited tenants reserved at their "
            "byte length, not counted with the model's tokenizer, by why", ["reason"], registry=r)
        self.tenant_tokens = Counter(
            "llmgw_tenant_tokens", "Tokens settled against tenant limits (the backend's count)",
            ["tenant", "kind"], registry=r)
        self.usage_lost = Counter(
            "llmgw_usage_entries_lost", "Usage entries dropped unreported (the control plane "
            "took no report for too long)", registry=r)
