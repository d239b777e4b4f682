"""Which limits a request is held to: the tenant's own, and the tenant's limits for the model it
calls, each a scope of its own counters. Pure data, parsed from the routing table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Limits:
    """None: no limit of that kind."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    concurrent_requests: int | None = None
    daily_tokens: int | None = None

    @classmethod
    def parse(cls, document: Mapping[str, Any]) -> Limits:
        """From the routing table's JSON; an unknown kind or a non-positive value raises
        ``ValueError`` (a newer control plane's limit must not be silently dropped)."""
        known = {f.name for f in fields(cls)}
        unknown = set(document) - known
        if unknown:
            raise ValueError(f"unknown limit(s) {', '.join(sorted(unknown))}")
        for name, value in document.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"limit {name} must be a positive integer, got {value!r}")
        return cls(**document)

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    @property
    def limits_tokens(self) -> bool:
        """Whether a request needs its prompt's tokens counted to be held to these."""
        return self.tokens_per_minute is not None or self.daily_tokens is not None


NO_LIMITS = Limits()


@dataclass(frozen=True)
class Scope:
    """One set of counters: the tenant's over all models, or over one model."""

    key: str  # part of every counter's key: "acme" or "acme/chat"
    label: str  # in refusals: "tenant 'acme'" or "tenant 'acme' on model 'chat'"
    limits: Limits


def scopes_for(tenant: str, limits: Limits, model_limits: Mapping[str, Limits], model: str
               ) -> list[Scope]:
    """The scopes a request of ``tenant`` to ``model`` counts in; empty: unlimited."""
    scopes = []
    if limits:
        scopes.append(Scope(tenant, f"tenant '{tenant}'", limits))
    for_model = model_limits.get(model)
    if for_model:
        scopes.append(Scope(f"{tenant}/{model}", f"tenant '{tenant}' on model '{model}'",
                            for_model))
    return scopes
