"""Publishing an event: into the outbox, in the transaction of the change it reports.

Nothing is sent here. The event and its deliveries commit or roll back with the caller's change,
so a receiver never hears of a change that did not happen, and a process that dies after the
commit leaves the deliveries pending for the sender (of this replica or another) to send.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.orm import Session

from control_plane.db import utcnow
from control_plane.webhooks.events import EVENT_TYPES
from control_plane.webhooks.orm import DeliveryState, WebhookDelivery, WebhookEvent
from control_plane.webhooks.repository import DeliveryRepository, SubscriptionRepository


def publish(session: Session, event_type: str, payload: dict[str, Any]) -> WebhookEvent:
    """Record ``event_type`` with its JSON ``payload`` and one pending delivery per active
    subscription to it; flushes, the caller commits (then calls the sender's ``trigger()``)."""
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown webhook event type '{event_type}'; publish one of "
                         f"{', '.join(EVENT_TYPES)}")
    now = utcnow()
    event = WebhookEvent(id=uuid.uuid4().hex, event_type=str(event_type), payload=payload,
                         created_at=now)
    deliveries = [
        WebhookDelivery(id=uuid.uuid4().hex, event_id=event.id, subscription_id=subscription.id,
                        state=DeliveryState.PENDING.value, attempts=0, next_attempt_at=now,
                        created_at=now)
        for subscription in SubscriptionRepository(session).active()
        if event_type in subscription.events]
    DeliveryRepository(session).add_event(event, deliveries)
    return event
