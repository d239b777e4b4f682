"""A real webhook receiver on a loopback port, fast retry settings, and helpers to subscribe and
publish through the feature's own code."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction
from control_plane.settings import Settings
from control_plane.webhooks import outbox, service
from control_plane.webhooks.backoff import RetryPolicy
from control_plane.webhooks.orm import WebhookDelivery
from control_plane.webhooks.schemas import WebhookCreate
from control_plane.webhooks.sender import WebhookSender
from tests.control_plane.conftest import TEST_ACTOR

# Retries within milliseconds, so a test of a receiver that is down for a while takes a moment.
FAST_POLICY = RetryPolicy(max_attempts=4, base_s=0.01, max_s=0.05)
POLL_S = 0.05
TIMEOUT_S = 5.0


@pytest.fixture
def settings(database_url: str, source_root: Path) -> Settings:
    return Settings(database_url=database_url, source_roots=[source_root],
                    webhook_poll_interval_seconds=POLL_S, webhook_timeout_seconds=TIMEOUT_S,
                    webhook_max_attempts=FAST_POLICY.max_attempts,
                    webhook_backoff_base_seconds=FAST_POLICY.base_s,
                    webhook_backoff_max_seconds=FAST_POLICY.max_s,
                    _env_file=None)  # type: ignore[call-arg]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def delivery_id(self) -> str:
        return self.headers["X-LLMCP-Delivery"]

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """An HTTP server that records every POST and answers ``statuses`` in order, then 200.

    ``stop()`` and ``start()`` again on the same port: a receiver that is down for a while."""

    port: int = field(default_factory=free_port)
    statuses: list[int] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def acknowledged(self) -> list[str]:
        """Delivery ids of the requests answered with a 2xx, in arrival order."""
        with self._lock:
            return [r.delivery_id for r in self.received if 200 <= r.status < 300]

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._lock:
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                    receiver.received.append(Received(dict(self.headers.items()), body, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = _Server(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _Server(ThreadingHTTPServer):
    # The standard library listens with a backlog of 5: two senders posting a batch of 8 each at
    # once overflow it and see connections reset, which a production receiver would not do.
    request_queue_size = 128


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def down_receiver() -> Iterator[Receiver]:
    """A receiver that is not listening yet: the test starts it."""
    server = Receiver()
    yield server
    server.stop()


@pytest.fixture
def sender(session_factory: sessionmaker[Session]) -> Iterator[WebhookSender]:
    """A sender with fast retries; not started, so a test drives it with ``send_due()`` unless
    it starts it."""
    webhook_sender = WebhookSender(session_factory, FAST_POLICY, poll_interval_s=POLL_S,
                                   timeout_s=TIMEOUT_S)
    yield webhook_sender
    webhook_sender.stop()


def subscribe(factory: sessionmaker[Session], url: str,
              events: tuple[str, ...] = ("promotion.succeeded",)) -> tuple[str, str]:
    """A subscription made through the service; returns its id and secret."""
    with transaction(factory) as session:
        subscription = service.create_subscription(
            session, TEST_ACTOR, WebhookCreate.model_validate({"url": url, "events": events}))
        return subscription.id, subscription.secret


def publish(factory: sessionmaker[Session], event_type: str = "promotion.succeeded",
            payload: dict[str, Any] | None = None) -> str:
    """Publish in a committed transaction, as the promotion code does; returns the event id."""
    with transaction(factory) as session:
        return outbox.publish(session, event_type, payload or {"model": "m", "version": 2}).id


def deliveries(factory: sessionmaker[Session]) -> list[WebhookDelivery]:
    with transaction(factory, read_only=True) as session:
        return list(session.scalars(select(WebhookDelivery).order_by(WebhookDelivery.created_at,
                                                                     WebhookDelivery.id)))


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s:g} s")
        time.sleep(0.02)
