"""Signatures: HMAC-SHA256 over timestamp + "." + body, rejected outside a 5-minute window."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from control_plane.webhooks.signing import TOLERANCE_S, sign, verify

SECRET = "whsec_test"
BODY = b'{"id":"d1","event":"promotion.succeeded"}'
NOW = 1_800_000_000


def test_signature_is_hmac_sha256_of_timestamp_dot_body() -> None:
    expected = hmac.new(SECRET.encode(), f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert sign(SECRET, NOW, BODY) == f"sha256={expected}"


def test_the_window_is_five_minutes() -> None:
    assert TOLERANCE_S == 300


@pytest.mark.parametrize(("secret", "timestamp", "body", "signature", "now", "valid"), [
    (SECRET, str(NOW), BODY, sign(SECRET, NOW, BODY), NOW, True),
    (SECRET, str(NOW), BODY, sign(SECRET, NOW, BODY), NOW + 300, True),
    (SECRET, str(NOW), BODY, sign(SECRET, NOW, BODY), NOW - 300, True),
    (SECRET, str(NOW), BODY, sign(SECRET, NOW, BODY), NOW + 301, False),  # replayed later
    (SECRET, str(NOW), BODY, sign(SECRET, NOW, BODY), NOW - 301, False),  # from the future
    (SECRET, str(NOW), BODY + b" ", sign(SECRET, NOW, BODY), NOW, False),  # body changed
    (SECRET, str(NOW + 1), BODY, sign(SECRET, NOW, BODY), NOW, False),  # timestamp changed
    ("whsec_other", str(NOW), BODY, sign(SECRET, NOW, BODY), NOW, False),  # another secret
    (SECRET, str(NOW), BODY, sign(SECRET, NOW, BODY).upper(), NOW, False),
    (SECRET, str(NOW), BODY, "sha256=", NOW, False),
    (SECRET, str(NOW), BODY, "sha256=é", NOW, False),  # not ASCII: refused, not an error
    (SECRET, "", BODY, sign(SECRET, NOW, BODY), NOW, False),
    (SECRET, "-5", BODY, sign(SECRET, NOW, BODY), NOW, False),
    (SECRET, "１２", BODY, sign(SECRET, NOW, BODY), NOW, False),  # Unicode digits
])
def test_verify(secret: str, timestamp: str, body: bytes, signature: str, now: int,
                valid: bool) -> None:
    assert verify(secret, timestamp, body, signature, now=now) is valid
