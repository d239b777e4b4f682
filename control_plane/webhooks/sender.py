"""The background sender: posts due deliveries from the outbox, records each outcome, retries.

One pass: read which deliveries are due (read-only), lease them with a guarded UPDATE (one
transaction, no I/O), post them side by side with no transaction open, then record each outcome in
a transaction of its own. A 2xx marks the delivery delivered and it is never claimed again;
anything else (refused, timed out, another status) schedules the next attempt with exponential
backoff and full jitter, or fails the delivery after the last one.

Delivery is at least once: a sender that dies after the receiver's 2xx but before recording it,
or that outlives its lease (``lease_s``), lets the delivery be sent again under the same delivery
id, which is what receivers de-duplicate on. The loop never dies: each pass catches, logs and
tries again at the next one.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction, utcnow
from control_plane.metrics.registry import ControlPlaneMetrics
from control_plane.settings import Settings
from control_plane.webhooks import message
from control_plane.webhooks.backoff import RetryPolicy
from control_plane.webhooks.repository import DeliveryRepository

log = logging.getLogger(__name__)
MAX_ERROR_LENGTH = 500


@dataclass(frozen=True)
class Claim:
    """A delivery this sender holds the lease of, with everything posting it needs."""

    delivery_id: str
    lease_until: datetime
    attempts: int
    url: str
    secret: str
    event_type: str
    event_created_at: datetime
    data: dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    """What one attempt got: the receiver's status (None: no answer) and, unless it was a 2xx,
    why it failed."""

    status_code: int | None
    error: str | None = None


class WebhookSender:
    def __init__(self, session_factory: sessionmaker[Session], policy: RetryPolicy, *,
                 poll_interval_s: float = 1.0, timeout_s: float = 10.0,
                 batch_size: int = 8, metrics: ControlPlaneMetrics | None = None) -> None:
        self.session_factory = session_factory
        self.metrics = metrics or ControlPlaneMetrics()
        self.policy = policy
        self.poll_interval_s = poll_interval_s
        self.timeout_s = timeout_s
        self.batch_size = batch_size
        # httpx's timeout bounds each phase (pool, connect, write, read) rather than the whole
        # post, so the lease covers all four plus a margin for a slow database.
        self.lease_s = 4 * timeout_s + 30
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_settings(cls, session_factory: sessionmaker[Session], settings: Settings,
                      metrics: ControlPlaneMetrics | None = None) -> WebhookSender:
        policy = RetryPolicy(max_attempts=settings.webhook_max_attempts,
                             base_s=settings.webhook_backoff_base_seconds,
                             max_s=settings.webhook_backoff_max_seconds)
        return cls(session_factory, policy, poll_interval_s=settings.webhook_poll_interval_seconds,
                   timeout_s=settings.webhook_timeout_seconds, metrics=metrics)

    # -- the loop ------------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="webhook-sender", daemon=True)
        self._thread.start()

    def trigger(self) -> None:
        """Look for due deliveries now rather than at the next poll (after a commit that
        published an event)."""
        self._wake.set()

    def stop(self) -> None:
        """Stop polling; posts in flight finish (each within the timeout) and are recorded."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.lease_s)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                # A full batch: more may be due, so no wait before the next pass.
                busy = self.send_due() == self.batch_size
            except Exception:  # the loop outlives any one pass (a database outage, a bug)
                log.exception("webhook pass failed; trying again in %.1f s", self.poll_interval_s)
                busy = False
            if not busy:
                self._wake.wait(self.poll_interval_s)
            self._wake.clear()

    # -- one pass ------------------------------------------------------------------------------

    def send_due(self) -> int:
        """Post every delivery due now that no other sender holds (up to a batch); returns how
        many were attempted."""
        claims = self._claim()
        if not claims:
            return 0
        with httpx.Client(timeout=self.timeout_s) as http, \
                ThreadPoolExecutor(max_workers=len(claims),
                                   thread_name_prefix="webhook-post") as pool:
            for claim, outcome in zip(claims, pool.map(lambda c: self._post(http, c), claims),
                                      strict=True):
                self._record(claim, outcome)
        return len(claims)

    def _claim(self) -> list[Claim]:
        now = utcnow()
        # Looking first takes no write lock on SQLite, so an idle poll does not queue behind (or
        # hold up) the API's writers.
        with transaction(self.session_factory, read_only=True) as session:
            due = DeliveryRepository(session).due_ids(now, self.batch_size)
        if not due:
            return []
        lease_until = now + timedelta(seconds=self.lease_s)
        with transaction(self.session_factory) as session:
            repository = DeliveryRepository(session)
            won = [delivery_id for delivery_id in due
                   if repository.claim(delivery_id, now, lease_until)]
            rows = repository.claimed(won) if won else []
            return [Claim(delivery_id=delivery.id, lease_until=lease_until,
                          attempts=delivery.attempts, url=subscription.url,
                          secret=subscription.secret, event_type=event.event_type,
                          event_created_at=event.created_at, data=event.payload)
                    for delivery, event, subscription in rows]

    def _post(self, http: httpx.Client, claim: Claim) -> Outcome:
        content = message.body(claim.delivery_id, claim.event_type, claim.event_created_at,
                               claim.data)
        headers = message.headers(claim.secret, claim.delivery_id, claim.event_type, content,
                                  int(time.time()))
        try:
            # Streamed and never read: the status is the answer, and a receiver's large or slow
            # body must not hold the sender.
            with http.stream("POST", claim.url, content=content, headers=headers) as response:
                status = response.status_code
        except httpx.TimeoutException as exc:
            return Outcome(None, f"no answer within {self.timeout_s:g} s ({type(exc).__name__})")
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return Outcome(None, f"could not reach the receiver ({type(exc).__name__}: {exc})")
        except Exception as exc:  # a bug must fail the attempt, not the pass
            log.exception("posting webhook delivery %s failed", claim.delivery_id)
            return Outcome(None, f"internal error: {type(exc).__name__}: {exc}")
        if 200 <= status < 300:
            return Outcome(status)
        return Outcome(status, f"the receiver answered HTTP {status}; only a 2xx acknowledges a "
                               "delivery")

    def _record(self, claim: Claim, outcome: Outcome) -> None:
        now = utcnow()
        attempts = claim.attempts + 1
        try:
            with transaction(self.session_factory) as session:
                repository = DeliveryRepository(session)
                if outcome.error is None and outcome.status_code is not None:
                    repository.record_delivered(claim.delivery_id, outcome.status_code, now)
                    recorded = "delivered"
                else:
                    last = self.policy.exhausted(attempts)
                    recorded = "exhausted" if last else "retrying"
                    repository.record_failure(
                        claim.delivery_id, claim.lease_until, attempts=attempts,
                        status_code=outcome.status_code,
                        error=(outcome.error or "")[:MAX_ERROR_LENGTH],
                        next_attempt_at=None if last else
                        now + timedelta(seconds=self.policy.delay(attempts)))
        except Exception:
            # The lease runs out and the delivery is attempted again: at least once.
            log.exception("could not record the outcome of webhook delivery %s",
                          claim.delivery_id)
            return
        self.metrics.webhook_deliveries.labels(recorded).inc()
        if outcome.error is not None:
            log.warning("webhook delivery %s to %s failed (attempt %d of %d): %s",
                        claim.delivery_id, claim.url, attempts, self.policy.max_attempts,
                        outcome.error)
