"""Scopes and the actor a request runs as; free of any web framework so services can take them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Scope(StrEnum):
    """What a token may do; each scope includes the ones below it (admin > write > node > report >
    read). ``report``: read, and report usage (a gateway's token). ``node``: also register a
    Triton node and take it out (a node agent's token: it can change no model, alias or
    deployment)."""

    READ = "read"
    REPORT = "report"
    NODE = "node"
    WRITE = "write"
    ADMIN = "admin"

    def includes(self, required: Scope) -> bool:
        return _RANK[self] >= _RANK[required]


_RANK = {Scope.READ: 0, Scope.REPORT: 1, Scope.NODE: 2, Scope.WRITE: 3, Scope.ADMIN: 4}


@dataclass(frozen=True)
class Actor:
    """The caller of one request or command, as the audit log records it."""

    name: str
    scope: Scope
    request_id: str | None = None
