"""Signing a delivery so its receiver can tell it came from us and was not replayed later.

The signature is HMAC-SHA256, keyed with the subscription's secret, over the timestamp, a dot and
the raw body: ``sha256=<hex>`` in ``X-LLMCP-Signature``, the Unix timestamp in seconds in
``X-LLMCP-Timestamp``. Signing the timestamp with the body binds the two, so an attacker who
recorded a delivery cannot resend it with a fresh timestamp; a receiver rejects a timestamp more
than five minutes away from its own clock (``TOLERANCE_S``), which bounds how long a recorded
delivery stays replayable and leaves room for clock skew. Each attempt is signed anew.
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "X-LLMCP-Signature"
TIMESTAMP_HEADER = "X-LLMCP-Timestamp"
EVENT_HEADER = "X-LLMCP-Event"
DELIVERY_HEADER = "X-LLMCP-Delivery"
SCHEME = "sha256="
TOLERANCE_S = 300


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-LLMCP-Signature`` value of ``body`` sent at ``timestamp`` (Unix seconds)."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return SCHEME + digest.hexdigest()


def verify(secret: str, timestamp_header: str, body: bytes, signature_header: str,
           now: float | None = None, tolerance_s: float = TOLERANCE_S) -> bool:
    """True if the headers sign ``body`` with ``secret`` and the timestamp is within the window."""
    if not timestamp_header.isascii() or not timestamp_header.isdigit():
        return False
    timestamp = int(timestamp_header)
    if abs((time.time() if now is None else now) - timestamp) > tolerance_s:
        return False
    # Constant time: a comparison that stops at the first wrong character tells an attacker, by
    # its timing, how much of a forged signature is right.
    return hmac.compare_digest(sign(secret, timestamp, body).encode(),
                               signature_header.encode(errors="replace"))
