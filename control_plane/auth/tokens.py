"""API tokens: created with a secret shown once, stored as its sha256, resolved to an actor."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from control_plane.auth import audit
from control_plane.auth.orm import ApiToken
from control_plane.auth.repository import TokenRepository
from control_plane.auth.scopes import Actor, Scope
from control_plane.errors import Conflict, InvalidRequest, TokenNotFound

# The prefix makes a leaked token recognisable to secret scanners and to a human.
SECRET_PREFIX = "llmcp_"
TOKEN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")


@dataclass(frozen=True)
class IssuedToken:
    name: str
    scope: Scope
    secret: str


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


# A secret an operator brings (a Kubernetes or compose secret) must be as hard to guess as ours.
MIN_PROVIDED_SECRET_LENGTH = 32


def _check_name(name: str) -> None:
    if not TOKEN_NAME.match(name):
        raise InvalidRequest(f"token name '{name}' is not allowed: use 1-64 letters, digits, "
                             "'.', '_', '@' or '-', starting with a letter or digit")


def create_token(session: Session, actor: Actor, name: str, scope: Scope) -> IssuedToken:
    """Create a token; its secret exists only in the returned value."""
    _check_name(name)
    repository = TokenRepository(session)
    if repository.get_by_name(name) is not None:
        raise Conflict(f"a token named '{name}' already exists; pick another name")
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    repository.add(ApiToken(name=name, scope=scope.value, secret_hash=hash_secret(secret)))
    audit.record(session, actor, "token.create", "token", name, after={"name": name,
                                                                        "scope": scope.value})
    return IssuedToken(name=name, scope=scope, secret=secret)


def import_token(session: Session, actor: Actor, name: str, scope: Scope, secret: str) -> bool:
    """Make sure a token named ``name`` with ``scope`` accepts ``secret``, a secret generated
    outside (a deployment's secret store, shared with the process that uses it). Returns False
    when it already does: a migration job may run again. A token of that name with another
    secret or scope is a conflict: rotating one is a revoke, then an import."""
    _check_name(name)
    if len(secret) < MIN_PROVIDED_SECRET_LENGTH or any(c.isspace() for c in secret):
        raise InvalidRequest(f"the secret for token '{name}' must be at least "
                             f"{MIN_PROVIDED_SECRET_LENGTH} characters with no spaces; generate "
                             "one with e.g. 'openssl rand -hex 32'")
    repository = TokenRepository(session)
    existing = repository.get_by_name(name)
    if existing is not None:
        if existing.secret_hash == hash_secret(secret) and existing.scope == scope.value:
            return False
        raise Conflict(f"a token named '{name}' already exists with another secret or scope "
                       f"('{existing.scope}'); revoke it first ('llm-control-plane tokens "
                       f"revoke {name}') to replace it")
    repository.add(ApiToken(name=name, scope=scope.value, secret_hash=hash_secret(secret)))
    audit.record(session, actor, "token.import", "token", name, after={"name": name,
                                                                        "scope": scope.value})
    return True


def list_tokens(session: Session, limit: int, offset: int) -> tuple[Sequence[ApiToken], int]:
    return TokenRepository(session).list(limit, offset)


def revoke_token(session: Session, actor: Actor, name: str) -> None:
    """Delete the token; it stops working at once in every process (each forgets the tokens it
    cached when any token changes, see read_cache)."""
    repository = TokenRepository(session)
    token = repository.get_by_name(name)
    if token is None:
        raise TokenNotFound(name)
    before = {"name": token.name, "scope": token.scope}
    repository.delete(token)
    audit.record(session, actor, "token.revoke", "token", name, before=before)

