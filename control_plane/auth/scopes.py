"""Scopes and the actor a request runs as; free of any web framework so services can take them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Scope(StrEnum):
    """What a token may do; each scope includes the ones below it (admin > write > report >
    read). ``report``: read, and report usage (a gateway's token)."""

    READ = "read"
    REPORT = "report"
    WRITE = "write"
    ADMIN = "admin"

    def includes(self, required: Scope) -> bool:
        return _RANK[self] >= _RANK[required]


_RANK = {Scope.READ: 0, Scope.REPORT: 1, Scope.WRITE: 2, Scope.ADMIN: 3}


@dataclass(frozen=True)
class Actor:
    """The caller of one request or command, as the audit log records it."""

    name: str
    scope: Scope
    request_id: str | None = None
