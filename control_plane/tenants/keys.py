"""Inference API keys: a secret shown once, stored as its sha256 (as API tokens are)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from control_plane.auth.tokens import hash_secret

# Tells a gateway key from a control-plane token (llmcp_) at a glance, and to secret scanners.
KEY_PREFIX = "llmgw_"
# What the table keeps of the secret to recognise it: "llmgw_" and 6 random characters.
SHOWN_PREFIX_LENGTH = 12


@dataclass(frozen=True)
class NewKey:
    secret: str
    prefix: str
    secret_hash: str


def new_key() -> NewKey:
    """A fresh key: 256 random bits, so a fast unsalted hash is not open to guessing."""
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    return NewKey(secret=secret, prefix=secret[:SHOWN_PREFIX_LENGTH],
                  secret_hash=hash_secret(secret))
