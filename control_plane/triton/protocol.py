"""What the control plane needs from one Triton node, as a Protocol the domain code can import
without tritonclient, and the errors every implementation raises.

TritonControlError
├── NodeUnreachable          no answer: connection refused, timeout, server not live
├── RepositoryAccessDenied   the node's repository API is locked and our key is missing or wrong
├── LoadRejected             Triton answered and refused or failed the load; carries its reason
└── ModelNotLoaded           a question about a model the node does not serve
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol


class ModelState(StrEnum):
    """A model version's state as Triton's repository index names it."""

    READY = "READY"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class IndexEntry:
    """One model version a node knows. ``version`` is None for a model it has never loaded."""

    name: str
    version: int | None
    state: ModelState
    reason: str = ""


class TritonControlError(Exception):
    def __init__(self, message: str, url: str) -> None:
        super().__init__(message)
        self.message = message
        self.url = url


class NodeUnreachable(TritonControlError):
    def __init__(self, url: str, detail: str) -> None:
        super().__init__(f"Triton node {url} is unreachable: {detail}", url)
        self.detail = detail


class RepositoryAccessDenied(TritonControlError):
    def __init__(self, url: str, detail: str) -> None:
        super().__init__(
            f"Triton node {url} refused its model-repository API to us ({detail}): the node was "
            "started with a repository key; give the control plane the same key", url,
        )
        self.detail = detail


class LoadRejected(TritonControlError):
    def __init__(self, url: str, model: str, reason: str, hint: str = "") -> None:
        message = f"Triton node {url} did not load '{model}': {reason}"
        super().__init__(f"{message} ({hint})" if hint else message, url)
        self.model = model
        self.reason = reason


class ModelNotLoaded(TritonControlError):
    def __init__(self, url: str, model: str, detail: str) -> None:
        super().__init__(f"Triton node {url} does not serve '{model}': {detail}", url)
        self.model = model


class TritonControl(Protocol):
    """One Triton node in explicit model-control mode, driven through its repository API."""

    def index(self) -> list[IndexEntry]:
        """Every model version the node knows, sorted by name and version.

        Triton's own repository index lists only models that have a directory in the node's
        repository; a model loaded from config and files alone appears only while it is READY.
        """
        ...

    def load(self, name: str, config_json: str, files: Mapping[str, bytes]) -> None:
        """Load (or reload) ``name`` from a ``ModelConfig`` JSON and ``{"file:<v>/<path>": bytes}``.

        Returns once the model is READY. Triton reloads a loaded model only when the config
        differs from the one it runs: new files under an unchanged config are ignored. A failed
        reload leaves the loaded model serving.
        """
        ...

    def unload(self, name: str) -> None:
        """Ask the node to unload ``name``; returns at once while the model drains and exits."""
        ...

    def is_server_live(self) -> bool:
        """False when the node is not live or cannot be reached."""
        ...

    def is_model_ready(self, name: str) -> bool:
        """Whether ``name`` answers inference now; raises NodeUnreachable rather than guess."""
        ...

    def metadata(self, name: str) -> dict[str, Any]:
        """Triton's model metadata (name, versions, platform, inputs, outputs) as a dict."""
        ...

    def metrics(self) -> str:
        """The node's Prometheus metrics page as text."""
        ...

    def server_version(self) -> str:
        """Triton's own version from its server metadata, e.g. "2.51.0" (release r24.10)."""
        ...
