"""Running a creating call at most once per (actor, Idempotency-Key)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session

from control_plane.auth.scopes import Actor
from control_plane.db import utcnow
from control_plane.errors import InvalidRequest
from control_plane.idempotency.orm import IdempotencyKey
from control_plane.idempotency.repository import IdempotencyRepository

MAX_KEY_LENGTH = 128
# How long a key is remembered: long enough for any client's retries (and a CI job rerun), short
# enough that the table does not grow without end. After it, the same key starts a new request.
KEY_LIFETIME = timedelta(hours=24)


@dataclass(frozen=True)
class StoredResponse:
    status_code: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    replayed: bool = False


def fingerprint(method: str, path: str, body: dict[str, Any]) -> str:
    canonical = json.dumps([method.upper(), path, body], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def run_once(session: Session, actor: Actor, key: str, request_fingerprint: str,
             perform: Callable[[], StoredResponse]) -> StoredResponse:
    """``perform()`` the first time ``key`` is seen; afterwards, its stored response."""
    if not 0 < len(key) <= MAX_KEY_LENGTH or "\x00" in key:
        raise InvalidRequest(f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} characters, none NUL")
    repository = IdempotencyRepository(session)
    # Only this actor's rows: cheap on the (actor, key) index, and no contention between clients.
    repository.forget_older_than(actor.name, utcnow() - KEY_LIFETIME)
    existing = repository.get(actor.name, key)
    if existing is None:
        # Claimed before the work, so a concurrent retry waits on the key instead of doing the
        # work a second time. An error in perform() rolls the claim back with everything else.
        claimed = repository.claim(actor.name, key, request_fingerprint)
        if claimed is not None:
            result = perform()
            repository.complete(claimed, result.status_code, result.headers, result.body)
            return result
        existing = repository.get(actor.name, key)  # the concurrent request committed it
        if existing is None:
            raise RuntimeError(f"idempotency key '{key}' vanished after a unique violation")
    return _replay(existing, key, request_fingerprint)


def _replay(record: IdempotencyKey, key: str, request_fingerprint: str) -> StoredResponse:
    if record.fingerprint != request_fingerprint:
        raise InvalidRequest(f"Idempotency-Key '{key}' was already used for a different request; "
                             "use a new key for a new request")
    if record.status_code is None or record.body is None:
        raise RuntimeError(f"idempotency key '{key}' was committed without its response")
    return StoredResponse(status_code=record.status_code, body=record.body,
                          headers=record.headers or {}, replayed=True)
