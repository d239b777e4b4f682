"""The receiver in the README, run as it is printed there, verifies what the sender posts."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from control_plane.webhooks.sender import WebhookSender
from control_plane.webhooks.signing import sign
from tests.control_plane.webhooks.conftest import Receiver, deliveries, publish, subscribe

README = Path(__file__).parents[3] / "README.md"
MARKER = "<!-- webhook-verify-example -->"


def readme_example() -> str:
    """The ```python block right after the marker."""
    text = README.read_text()
    assert text.count(MARKER) == 1, f"README.md should hold {MARKER} once"
    after = text.split(MARKER, 1)[1].lstrip("\n")
    assert after.startswith("```python\n"), f"a ```python block should follow {MARKER}"
    return after.removeprefix("```python\n").split("\n```", 1)[0]


@pytest.fixture
def example() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(readme_example(), str(README), "exec"), namespace)  # noqa: S102
    return namespace


@pytest.fixture
def readme_server(example: dict[str, Any]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), example["Hook"])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_the_readme_verify_accepts_what_the_receiver_got_and_nothing_altered(
        example: dict[str, Any], session_factory: sessionmaker[Session], receiver: Receiver,
        sender: WebhookSender) -> None:
    verify = example["verify"]
    _, secret = subscribe(session_factory, receiver.url)
    publish(session_factory)
    sender.send_due()

    [got] = receiver.received
    timestamp, signature = got.headers["X-LLMCP-Timestamp"], got.headers["X-LLMCP-Signature"]
    assert verify(secret, timestamp, got.body, signature)
    assert not verify(secret, timestamp, got.body.replace(b"m", b"n"), signature)
    assert not verify("whsec_other", timestamp, got.body, signature)
    assert not verify(secret, timestamp, got.body, signature, now=int(timestamp) + 301)
    assert verify(secret, timestamp, got.body, signature, now=int(timestamp) + 299)


def test_the_readme_receiver_acknowledges_signed_deliveries_and_refuses_forgeries(
        example: dict[str, Any], readme_server: str, session_factory: sessionmaker[Session],
        sender: WebhookSender) -> None:
    _, secret = subscribe(session_factory, readme_server)
    example["SECRET"] = secret
    publish(session_factory)
    sender.send_due()

    [delivery] = deliveries(session_factory)
    assert (delivery.state, delivery.last_status_code) == ("delivered", 204)
    assert example["seen"] == {delivery.id}

    body = b'{"id":"forged","event":"promotion.succeeded","created_at":"","data":{}}'
    now = int(time.time())
    for timestamp, signature in [(now, sign("whsec_guess", now, body)),
                                 (now - 301, sign(secret, now - 301, body))]:
        answer = httpx.post(readme_server, content=body, headers={
            "X-LLMCP-Timestamp": str(timestamp), "X-LLMCP-Signature": signature})
        assert answer.status_code == 401
    assert example["seen"] == {delivery.id}
