"""Events from the outbox reach a real receiver signed, survive a receiver that is down for a
while, and a delivery acknowledged with a 2xx is never sent again, even by two senders."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import make_engine, make_session_factory, transaction, utcnow
from control_plane.webhooks import outbox
from control_plane.webhooks.repository import DeliveryRepository
from control_plane.webhooks.sender import WebhookSender
from control_plane.webhooks.signing import verify
from tests.control_plane.webhooks.conftest import (
    FAST_POLICY,
    POLL_S,
    TIMEOUT_S,
    Receiver,
    deliveries,
    publish,
    subscribe,
    wait_until,
)


def test_a_committed_event_reaches_its_subscribers_signed(
        session_factory: sessionmaker[Session], receiver: Receiver, sender: WebhookSender
) -> None:
    subscription_id, secret = subscribe(session_factory, receiver.url,
                                        ("promotion.succeeded", "promotion.failed"))
    subscribe(session_factory, receiver.url, ("promotion.rolled_back",))  # not this event
    event_id = publish(session_factory, "promotion.succeeded", {"model": "m", "version": 2})

    assert sender.send_due() == 1
    assert sender.metrics.webhook_deliveries.labels("delivered")._value.get() == 1

    [got] = receiver.received
    [delivery] = deliveries(session_factory)
    assert (delivery.event_id, delivery.subscription_id) == (event_id, subscription_id)
    assert got.headers["X-LLMCP-Event"] == "promotion.succeeded"
    assert got.headers["X-LLMCP-Delivery"] == delivery.id
    assert got.headers["Content-Type"] == "application/json"
    assert verify(secret, got.headers["X-LLMCP-Timestamp"], got.body,
                  got.headers["X-LLMCP-Signature"])
    assert not verify("whsec_wrong", got.headers["X-LLMCP-Timestamp"], got.body,
                      got.headers["X-LLMCP-Signature"])
    body = got.json()
    assert body["id"] == delivery.id and body["event"] == "promotion.succeeded"
    assert body["data"] == {"model": "m", "version": 2}
    assert body["created_at"].startswith(str(utcnow().year))
    assert (delivery.state, delivery.attempts, delivery.last_status_code) == ("delivered", 1, 200)
    assert delivery.delivered_at is not None and delivery.claimed_until is None


def test_an_event_rolled_back_with_its_change_is_never_sent(
        session_factory: sessionmaker[Session], receiver: Receiver, sender: WebhookSender
) -> None:
    subscribe(session_factory, receiver.url)
    try:
        with transaction(session_factory) as session:
            outbox.publish(session, "promotion.succeeded", {"model": "m"})
            raise RuntimeError("the promotion's state change failed")
    except RuntimeError:
        pass
    assert sender.send_due() == 0
    assert deliveries(session_factory) == [] and receiver.received == []


def test_a_receiver_that_is_down_for_a_while_gets_the_event_after_retries(
        session_factory: sessionmaker[Session], down_receiver: Receiver) -> None:
    _, secret = subscribe(session_factory, down_receiver.url)
    publish(session_factory)
    # Attempts enough that however long the receiver takes to come up, the delivery is pending.
    sender = WebhookSender(session_factory, replace(FAST_POLICY, max_attempts=1000),
                           poll_interval_s=POLL_S, timeout_s=TIMEOUT_S)
    sender.start()
    try:
        # Nothing listens: refused, retried with backoff.
        wait_until(lambda: deliveries(session_factory)[0].attempts >= 2, "two refused attempts")
        [refused] = deliveries(session_factory)
        assert refused.state == "pending" and refused.last_status_code is None
        assert "could not reach the receiver" in (refused.last_error or "")

        # Back, but unwell for one more attempt.
        down_receiver.statuses = [503]
        down_receiver.start()
        wait_until(lambda: deliveries(session_factory)[0].state == "delivered", "the delivery")
    finally:
        sender.stop()

    [delivery] = deliveries(session_factory)
    assert delivery.attempts >= 4  # ≥ 2 refused, one 503, the 2xx
    assert delivery.last_status_code == 200 and delivery.last_error is None
    assert [r.status for r in down_receiver.received] == [503, 200]
    assert {r.delivery_id for r in down_receiver.received} == {delivery.id}
    assert all(verify(secret, r.headers["X-LLMCP-Timestamp"], r.body,
                      r.headers["X-LLMCP-Signature"]) for r in down_receiver.received)
    # Acknowledged: never sent again.
    assert sender.send_due() == 0
    assert down_receiver.acknowledged() == [delivery.id]


def test_a_delivery_fails_after_the_last_attempt(
        session_factory: sessionmaker[Session], receiver: Receiver, sender: WebhookSender
) -> None:
    subscribe(session_factory, receiver.url)
    publish(session_factory)
    receiver.statuses = [500] * 10

    def attempted() -> bool:
        sender.send_due()
        return deliveries(session_factory)[0].state != "pending"

    wait_until(attempted, "the last attempt")
    [delivery] = deliveries(session_factory)
    assert delivery.state == "failed" and delivery.attempts == FAST_POLICY.max_attempts
    assert delivery.last_status_code == 500
    assert "answered HTTP 500" in (delivery.last_error or "")
    assert len(receiver.received) == FAST_POLICY.max_attempts
    assert sender.send_due() == 0
    counted = sender.metrics.webhook_deliveries
    assert counted.labels("retrying")._value.get() == FAST_POLICY.max_attempts - 1
    assert counted.labels("exhausted")._value.get() == 1
    assert counted.labels("delivered")._value.get() == 0


def test_two_senders_on_one_database_send_each_delivery_once(
        session_factory: sessionmaker[Session], database_url: str, receiver: Receiver,
        sender: WebhookSender) -> None:
    subscribe(session_factory, receiver.url)
    subscribe(session_factory, receiver.url)
    for number in range(15):
        publish(session_factory, payload={"model": "m", "version": number})
    # The other replica: its own engine and connections on the same database.
    other_engine = make_engine(database_url)
    other = WebhookSender(make_session_factory(other_engine), FAST_POLICY,
                          poll_interval_s=POLL_S, timeout_s=TIMEOUT_S)
    try:
        sender.start()
        other.start()
        wait_until(lambda: all(d.state == "delivered" for d in deliveries(session_factory)),
                   "every delivery")
    finally:
        other.stop()
        sender.stop()
        other_engine.dispose()

    ids = [d.id for d in deliveries(session_factory)]
    assert len(ids) == 30
    assert sorted(receiver.acknowledged()) == sorted(ids)
    assert all(d.attempts == 1 for d in deliveries(session_factory))


def test_a_leased_delivery_is_left_to_its_holder(
        session_factory: sessionmaker[Session], receiver: Receiver, sender: WebhookSender
) -> None:
    subscribe(session_factory, receiver.url)
    publish(session_factory)
    [delivery] = deliveries(session_factory)
    now = utcnow()
    lease = now + timedelta(minutes=5)
    with transaction(session_factory) as session:
        assert DeliveryRepository(session).claim(delivery.id, now, lease)
        # A second claim, as another sender's, loses while the lease runs.
        assert not DeliveryRepository(session).claim(delivery.id, now, lease)
    assert sender.send_due() == 0 and receiver.received == []

    with transaction(session_factory) as session:
        # A holder whose lease was taken over has no say over the outcome.
        assert not DeliveryRepository(session).record_failure(
            delivery.id, lease - timedelta(seconds=1), attempts=1, status_code=503,
            error="late", next_attempt_at=now)
        # Its lease ran out (the sender died): another sender takes the delivery over.
        later = lease + timedelta(seconds=1)
        assert DeliveryRepository(session).claim(delivery.id, later, later + timedelta(minutes=5))
