"""The gateway's settings: one class, from ``LLMGW_*`` environment variables and ``.env``."""

from __future__ import annotations

import os
from enum import StrEnum

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from gateway.quotas.admission import FailureMode

MiB = 1024 * 1024


class RoutingPolicy(StrEnum):
    LEAST_LOADED = "least_loaded"
    ROUND_ROBIN = "round_robin"


class GatewaySettings(BaseSettings):
    """Everything the gateway reads from its environment."""

    # LLMGW_SECRETS_DIR: a directory of files named like the variables
    # (llmgw_control_plane_token, llmgw_gateway_secret), each holding that variable's value:
    # secrets mounted as files (compose, Kubernetes) rather than written into an environment.
    model_config = SettingsConfigDict(env_prefix="LLMGW_", env_file=".env", extra="ignore",
                                      secrets_dir=os.environ.get("LLMGW_SECRETS_DIR"))

    host: str = Field(default="0.0.0.0", description="address the public ports bind to")
    http_port: int = Field(default=8000, ge=1, le=65535, description="HTTP: KServe v2 and OpenAI")
    grpc_port: int = Field(default=8001, ge=0, le=65535,
                           description="gRPC: KServe v2 (GRPCInferenceService); 0 turns it off")
    control_plane_url: str = Field(
        default="http://127.0.0.1:8080",
        description="where the routing table is read (GET /api/v1/routing)")
    control_plane_token: SecretStr | None = Field(
        default=None, description="a control-plane API token with read scope")
    routing_wait_seconds: float = Field(
        default=25.0, gt=0, le=60, description="how long one long-poll of the routing table waits")
    # Sized from the served context: SmolLM2's 2048 tokens at the prompt bound below is 256 KiB of
    # prompt; JSON escaping can grow that six-fold. 8 MB ends the bundled r24.10 with SIGSEGV.
    max_body_bytes: int = Field(
        default=2 * MiB, ge=1024, description="largest request body (HTTP) or message (gRPC)")
    max_bytes_per_token: int = Field(
        default=128, ge=1,
        description="most prompt bytes one token covers: a prompt over max_model_len × this "
                    "cannot fit and is refused without tokenizing (the backend checks exactly)")
    body_timeout_seconds: float = Field(
        default=30.0, gt=0, description="how long a client may take to send its whole body")
    keep_alive_seconds: float = Field(
        default=15.0, gt=0, description="how long an idle HTTP connection stays open")
    max_header_bytes: int = Field(default=16 * 1024, ge=1024,
                                  description="largest request line and headers together")
    first_response_timeout_seconds: float = Field(
        default=300.0, gt=0, description="how long a request waits on a node for its first "
                                         "response (queueing included) before it fails")
    routing_policy: RoutingPolicy = Field(
        default=RoutingPolicy.LEAST_LOADED,
        description="least_loaded: fewest outstanding + waiting requests; round_robin: in turn")
    node_poll_interval_seconds: float = Field(
        default=1.0, gt=0, description="how often nodes' waiting gauges are read and ejected "
                                       "nodes are probed")
    ejection_base_seconds: float = Field(
        default=1.0, gt=0, description="first ejection of a failed node; doubles per failure")
    ejection_max_seconds: float = Field(default=30.0, gt=0,
                                        description="longest ejection between two probes")
    gateway_secret: SecretStr | None = Field(
        default=None, description="shared with the nodes (LLM_GATEWAY_SECRET): the backend "
                                  "trusts the tenant parameter only with it")
    anonymous_tenant: str | None = Field(
        default=None, description="a tenant that requests without a key run as; unset: a key "
                                  "is required")
    redis_url: str | None = Field(
        default=None, description="where tenant limits are counted (redis://host:port/db), "
                                  "shared by every gateway; unset: each gateway counts alone")
    redis_timeout_seconds: float = Field(
        default=0.25, gt=0, le=10, description="longest one Redis call may take before the "
                                               "store counts as down")
    limits_failure_mode: FailureMode = Field(
        default=FailureMode.OPEN,
        description="Redis down: 'open' counts in this gateway's memory (each replica on its "
                    "own), 'closed' refuses limited tenants' requests with 503")
    default_max_tokens: int = Field(
        default=16, ge=1, description="tokens a request without max_tokens reserves for its "
                                      "output (vLLM's default)")
    tokenizer_cache_size: int = Field(
        default=8, ge=1, le=1024,
        description="model versions whose tokenizer is kept for counting prompt tokens (each "
                    "one tens of MB; the least recently used goes)")
    usage_flush_seconds: float = Field(
        default=2.0, gt=0, le=300, description="how often usage is reported to the control "
                                               "plane: what a killed gateway can lose")
