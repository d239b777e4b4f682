"""The node agent's settings, from ``LLM_NODE_*`` environment variables."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# As the control plane names nodes (registry.schemas.MODEL_NAME_PATTERN): a pod name fits.
NODE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


class NodeSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LLM_NODE_", extra="ignore")

    name: str = Field(description="the node's name in the control plane (Kubernetes: the pod's)")
    advertise_host: str = Field(
        description="the host name or address the control plane and gateways reach this node "
                    "at (Kubernetes: <pod>.<headless service>; compose: the service name)")
    control_plane_url: str = Field(description="the control plane's admin API, e.g. "
                                               "http://control-plane:8080")
    token: SecretStr | None = Field(default=None, description="a node-scope API token")
    token_file: Path | None = Field(default=None, description="a file holding that token")
    repository_key_file: Path = Field(
        description="the file holding the key that opens this node's repository API (a secret "
                    "shared with the control plane only)")
    api_key_ref: str = Field(
        description="where the control plane reads that key: env:VAR or file:/path on its side")
    gateway_secret_file: Path | None = Field(
        default=None, description="a file holding the secret shared with the gateways (the "
                                  "backend trusts their tenant parameter only with it)")
    labels: dict[str, str] = Field(default_factory=dict, description="JSON object")
    gpu_inventory: str | None = Field(
        default=None, description="none, nvml, or metrics:<url of this node's Triton metrics>; "
                                  "unset: none (a CPU node)")
    http_port: int = Field(default=8000, ge=1, le=65535)
    grpc_port: int = Field(default=8001, ge=1, le=65535)
    metrics_port: int = Field(default=8002, ge=1, le=65535)
    model_repository: Path = Field(
        default=Path("/tmp/llm-node-repository"),
        description="an empty directory: models come from the control plane (explicit mode)")
    drain_seconds: float = Field(
        default=10.0, ge=0, description="on stop, how long gateways get to stop sending new "
                                        "requests here before Triton drains and exits")
    stop_timeout_seconds: float = Field(
        default=90.0, gt=0, description="how long Triton gets to drain open streams and unload")
    start_timeout_seconds: float = Field(default=120.0, gt=0)

    @field_validator("name")
    @classmethod
    def _a_node_name(cls, value: str) -> str:
        if not NODE_NAME.match(value):
            raise ValueError("must be 1-64 lower-case letters, digits, '.', '_' or '-', "
                             "starting with a letter or digit")
        return value

    @field_validator("gpu_inventory")
    @classmethod
    def _none_is_unset(cls, value: str | None) -> str | None:
        return None if value in (None, "", "none") else value

    def token_secret(self) -> str:
        """The token, from ``LLM_NODE_TOKEN`` or the file ``LLM_NODE_TOKEN_FILE``."""
        if self.token is not None:
            return self.token.get_secret_value()
        if self.token_file is None:
            raise ValueError("set LLM_NODE_TOKEN_FILE (or LLM_NODE_TOKEN) to a node-scope token "
                             "('llm-control-plane tokens create --scope node')")
        return _read(self.token_file, "LLM_NODE_TOKEN_FILE")

    def gateway_secret(self) -> str | None:
        if self.gateway_secret_file is None:
            return None
        return _read(self.gateway_secret_file, "LLM_NODE_GATEWAY_SECRET_FILE")

    def repository_key(self) -> str:
        return _read(self.repository_key_file, "LLM_NODE_REPOSITORY_KEY_FILE")


def _read(path: Path, variable: str) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise ValueError(f"cannot read {variable}={path}: {exc.strerror}") from exc
