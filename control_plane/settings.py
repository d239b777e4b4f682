"""The control plane's settings: one class, from ``LLMCP_*`` environment variables and ``.env``."""

from __future__ import annotations

import os
from pathlib import Path

from packaging.version import InvalidVersion, Version
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from control_plane.paths import CACHE_DIR
from control_plane.placement.model import Strategy

DEFAULT_DATABASE_PATH = CACHE_DIR / "control_plane.db"


class Settings(BaseSettings):
    """Everything the control plane reads from its environment."""

    # LLMCP_SECRETS_DIR: a directory of files named like the variables (llmcp_database_url),
    # each holding that variable's value: secrets mounted as files (compose, Kubernetes) rather
    # than written into an environment.
    model_config = SettingsConfigDict(env_prefix="LLMCP_", env_file=".env", extra="ignore",
                                      secrets_dir=os.environ.get("LLMCP_SECRETS_DIR"))

    database_url: str = Field(
        default=f"sqlite:///{DEFAULT_DATABASE_PATH}",
        description="SQLAlchemy URL; PostgreSQL as postgresql+psycopg://user@host/db",
    )
    source_roots: list[Path] = Field(
        default_factory=lambda: [CACHE_DIR / "models"],
        description="directories a version's local source must lie under (JSON list in the env)",
    )
    tokenizer_max_bytes: int = Field(
        default=32 * 1024 * 1024, ge=1024,
        description="largest tokenizer file (tokenizer.json, tokenizer_config.json, "
                    "chat_template.jinja) served to gateways for counting prompt tokens")
    reconcile_interval_seconds: float = Field(
        default=10.0, gt=0, description="how often the reconciler checks every node unprompted")
    node_down_after_missed_passes: int = Field(
        default=3, ge=1, le=100, description="reconcile passes in a row a node must miss before "
        "its deployments count as UNKNOWN and leave the gateways' routing tables")
    node_parallel_loads: int = Field(
        default=4, ge=1, le=64, description="loads the reconciler runs at once on one node when "
        "it heals (a node that restarted empty gets every model back side by side)")
    api_registration_threads: int = Field(
        default=3, ge=1, le=64, description="registrations each API worker runs at once (source "
        "read and hashed, then stored); the others wait their turn in order of arrival")
    read_cache: bool = Field(
        default=True, description="keep the hottest reads (token checks, model versions) in "
        "memory, emptied on PostgreSQL's change notifications (no effect on SQLite)")
    reconciler_enabled: bool = Field(
        default=True, description="false: this replica serves the API but never drives Triton")
    gpu_headroom_fraction: float = Field(
        default=0.05, ge=0, lt=1, description="share of each GPU's memory placement never books")
    placement_strategy: Strategy = Field(
        default=Strategy.BEST_FIT, description="best_fit packs GPUs; spread balances them")
    gpu_poll_interval_seconds: float = Field(
        default=5.0, gt=0, description="how often every node's GPUs are read")
    gpu_history: int = Field(default=120, ge=1, le=100_000,
                             description="readings kept per node (GET /nodes/{node}/gpus)")
    stats_poll_interval_seconds: float = Field(
        default=10.0, gt=0, description="how often every node's /metrics is read for "
                                        "GET /models/{model}/stats")
    stats_keep_seconds: float = Field(
        default=3600.0, gt=0, le=86400, description="how long node metric readings are kept "
                                                    "(the longest stats window)")
    autoscale_interval_seconds: float = Field(
        default=15.0, gt=0, description="how often the autoscaler decides for every policy")
    autoscale_keep_decisions_hours: float = Field(
        default=24.0, gt=0, description="how long the autoscaler's decisions are kept")
    operation_lease_seconds: float = Field(
        default=15.0, ge=1, le=600, description="a running operation whose process has not "
        "renewed its claim for this long (killed, cut off from the database) is failed as "
        "interrupted by another process; renewed every third of it")
    promotion_step_timeout_seconds: float = Field(
        default=900.0, gt=0, description="how long one promotion step may wait for its loads")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    workers: int = Field(
        default=1, ge=1, le=64, description="API worker processes of `llm-control-plane serve`; "
        "each claims operations from the database, one of all replicas' reconciles")
    webhook_poll_interval_seconds: float = Field(
        default=1.0, gt=0, description="how often the webhook sender looks for due deliveries")
    webhook_timeout_seconds: float = Field(
        default=10.0, gt=0, le=300,
        description="how long one webhook POST may take per phase (connect, send, answer)")
    webhook_max_attempts: int = Field(
        default=8, ge=1, le=100, description="attempts of a webhook delivery before it fails")
    webhook_backoff_base_seconds: float = Field(
        default=1.0, gt=0, description="longest wait after the first failed webhook attempt; "
                                       "it doubles with each failure (full jitter)")
    webhook_backoff_max_seconds: float = Field(
        default=300.0, gt=0, description="longest wait between two webhook attempts")
    min_triton_version: str = Field(
        default="2.70.0",
        description="nodes running an older Triton are flagged (version_warning) and logged; the "
                    "default is the first Triton release after NVIDIA security bulletin 5828 of "
                    "May 2026 (CVE-2026-24207 and others): set it to the release that bulletin "
                    "names as fixed")

    @field_validator("min_triton_version")
    @classmethod
    def _a_version_number(cls, value: str) -> str:
        try:
            Version(value)
        except InvalidVersion:
            raise ValueError(f"'{value}' is not a version number; write e.g. 2.70.0") from None
        return value
