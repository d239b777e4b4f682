"""The backend's adapter control requests as the domain sees them: a Protocol with no
tritonclient in it, the answer's shape, and its parser.

A control request is an inference request to the deployment's Triton model whose parameters say
``adapter_control`` = load | unload | list; the one answer's ``text_output`` is the backend's
adapters after the action, as JSON. Load of a name already loaded from the same path, and unload
of a name not loaded, succeed without doing anything, so repeating either is safe.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from control_plane.triton.specs import NodeEndpoint


class AdapterAnswerError(Exception):
    """The backend answered something that is not the control answer's shape."""


@dataclass(frozen=True)
class LoadedAdapter:
    name: str
    path: str
    rank: int
    requests_in_flight: int


@dataclass(frozen=True)
class AdapterListing:
    """The adapters one engine holds, and its LoRA limits."""

    adapters: tuple[LoadedAdapter, ...]
    max_loras: int
    max_lora_rank: int

    @property
    def names(self) -> frozenset[str]:
        return frozenset(adapter.name for adapter in self.adapters)

    def as_json(self) -> dict[str, Any]:
        return {"adapters": [vars(adapter) for adapter in self.adapters],
                "max_loras": self.max_loras, "max_lora_rank": self.max_lora_rank}


def parse_listing(text: str) -> AdapterListing:
    """The answer's ``text_output``; AdapterAnswerError names what does not fit."""
    try:
        document = json.loads(text)
        adapters = tuple(LoadedAdapter(name=str(a["name"]), path=str(a["path"]),
                                       rank=int(a["rank"]),
                                       requests_in_flight=int(a["requests_in_flight"]))
                         for a in document["adapters"])
        return AdapterListing(adapters, int(document["max_loras"]),
                              int(document["max_lora_rank"]))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise AdapterAnswerError(f"the backend's adapter answer is not the expected JSON "
                                 f"({type(exc).__name__}: {exc}): {text[:200]!r}") from None


class AdapterControl(Protocol):
    """One node's adapter control requests, to the Triton model ``triton_name``.

    Raises ``control_plane.triton.protocol.NodeUnreachable`` when the node does not answer and
    ``AdapterRequestRefused`` when the backend refuses (with its reason)."""

    def load(self, triton_name: str, name: str, path: str) -> AdapterListing: ...

    def unload(self, triton_name: str, name: str) -> AdapterListing: ...

    def list(self, triton_name: str) -> AdapterListing: ...


class AdapterRequestRefused(Exception):
    """The backend (or Triton in front of it) answered the control request with an error."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


AdapterControlFactory = Callable[[NodeEndpoint], AdapterControl]
