"""Webhook subscription use cases. Each takes the caller's session and flushes; the caller
commits. Publishing an event is ``outbox.publish``."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row
from sqlalchemy.orm import Session

from control_plane.auth import audit
from control_plane.auth.scopes import Actor
from control_plane.errors import NotFound
from control_plane.webhooks.orm import DeliveryState, WebhookDelivery, WebhookSubscription
from control_plane.webhooks.repository import DeliveryRepository, SubscriptionRepository
from control_plane.webhooks.schemas import WebhookCreate, WebhookOut

SECRET_PREFIX = "whsec_"


def _snapshot(subscription: WebhookSubscription) -> dict[str, Any]:
    # The secret stays out of the audit log, which every admin reads.
    return WebhookOut.of(subscription).model_dump(mode="json")


def create_subscription(session: Session, actor: Actor, data: WebhookCreate
                        ) -> WebhookSubscription:
    subscription = WebhookSubscription(
        id=uuid.uuid4().hex, url=str(data.url), events=[str(e) for e in data.events],
        secret=SECRET_PREFIX + secrets.token_urlsafe(32), description=data.description,
        active=True, created_by=actor.name)
    SubscriptionRepository(session).add(subscription)
    audit.record(session, actor, "webhook.create", "webhook", subscription.id,
                 after=_snapshot(subscription))
    return subscription


def get_subscription(session: Session, subscription_id: str) -> WebhookSubscription:
    subscription = SubscriptionRepository(session).get(subscription_id)
    if subscription is None:
        raise NotFound(f"webhook '{subscription_id}' does not exist; GET /api/v1/webhooks "
                       "lists them")
    return subscription


def list_subscriptions(session: Session, limit: int, offset: int
                       ) -> tuple[Sequence[WebhookSubscription], int]:
    return SubscriptionRepository(session).list(limit, offset)


def delete_subscription(session: Session, actor: Actor, subscription_id: str) -> None:
    """Forget a subscription and its deliveries; pending ones are never sent."""
    subscription = get_subscription(session, subscription_id)
    before = _snapshot(subscription)
    SubscriptionRepository(session).delete(subscription)
    audit.record(session, actor, "webhook.delete", "webhook", subscription_id, before=before)


def list_deliveries(session: Session, subscription_id: str, state: DeliveryState | None,
                    limit: int, offset: int
                    ) -> tuple[Sequence[Row[WebhookDelivery, str]], int]:
    get_subscription(session, subscription_id)
    return DeliveryRepository(session).list(subscription_id, state, limit, offset)
