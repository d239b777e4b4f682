"""All SQL of webhooks. Flush only; the caller's transaction commits."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Row, func, or_, select, update
from sqlalchemy.orm import Session

from control_plane.webhooks.orm import (
    DeliveryState,
    WebhookDelivery,
    WebhookEvent,
    WebhookSubscription,
)


class SubscriptionRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, subscription: WebhookSubscription) -> None:
        self.session.add(subscription)
        self.session.flush()

    def get(self, subscription_id: str) -> WebhookSubscription | None:
        return self.session.get(WebhookSubscription, subscription_id)

    def list(self, limit: int, offset: int) -> tuple[Sequence[WebhookSubscription], int]:
        """One page, newest first, and the total count."""
        total = self.session.scalar(select(func.count()).select_from(WebhookSubscription))
        page = self.session.scalars(select(WebhookSubscription).order_by(
            WebhookSubscription.created_at.desc(), WebhookSubscription.id)
            .limit(limit).offset(offset)).all()
        return page, total or 0

    def active(self) -> Sequence[WebhookSubscription]:
        return self.session.scalars(select(WebhookSubscription).where(
            WebhookSubscription.active.is_(True)).order_by(WebhookSubscription.id)).all()

    def delete(self, subscription: WebhookSubscription) -> None:
        self.session.delete(subscription)
        self.session.flush()


def _claimable(now: datetime) -> list[Any]:
    # Pending, due, and not leased to a sender (or its lease ran out: that sender died).
    return [WebhookDelivery.state == DeliveryState.PENDING.value,
            WebhookDelivery.next_attempt_at <= now,
            or_(WebhookDelivery.claimed_until.is_(None), WebhookDelivery.claimed_until <= now)]


class DeliveryRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add_event(self, event: WebhookEvent, deliveries: Sequence[WebhookDelivery]) -> None:
        self.session.add(event)
        # The event first: the deliveries' foreign key needs it on PostgreSQL at once.
        self.session.flush()
        self.session.add_all(deliveries)
        self.session.flush()

    def list(self, subscription_id: str, state: DeliveryState | None, limit: int, offset: int
             ) -> tuple[Sequence[Row[WebhookDelivery, str]], int]:
        """One page of (delivery, event type), newest first, and the total count."""
        conditions = [WebhookDelivery.subscription_id == subscription_id]
        if state is not None:
            conditions.append(WebhookDelivery.state == state.value)
        total = self.session.scalar(
            select(func.count()).select_from(WebhookDelivery).where(*conditions))
        page = self.session.execute(
            select(WebhookDelivery, WebhookEvent.event_type)
            .join(WebhookEvent, WebhookEvent.id == WebhookDelivery.event_id)
            .where(*conditions)
            .order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id)
            .limit(limit).offset(offset)).all()
        return page, total or 0

    def due_ids(self, now: datetime, limit: int) -> Sequence[str]:
        return self.session.scalars(select(WebhookDelivery.id).where(*_claimable(now))
                                    .order_by(WebhookDelivery.next_attempt_at).limit(limit)).all()

    def claim(self, delivery_id: str, now: datetime, lease_until: datetime) -> bool:
        """Lease one delivery until ``lease_until``; False if another sender holds it or it is
        no longer pending. The guard is re-checked under the row's lock, so one sender wins."""
        changed = self.session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id == delivery_id, *_claimable(now))
            .values(claimed_until=lease_until)
            .execution_options(synchronize_session=False))
        return bool(changed.rowcount)  # type: ignore[attr-defined]

    def claimed(self, delivery_ids: Sequence[str]
                ) -> Sequence[Row[WebhookDelivery, WebhookEvent, WebhookSubscription]]:
        """The leased deliveries with what sending them needs: their event and subscription."""
        return self.session.execute(
            select(WebhookDelivery, WebhookEvent, WebhookSubscription)
            .join(WebhookEvent, WebhookEvent.id == WebhookDelivery.event_id)
            .join(WebhookSubscription,
                  WebhookSubscription.id == WebhookDelivery.subscription_id)
            .where(WebhookDelivery.id.in_(delivery_ids))).all()

    def record_delivered(self, delivery_id: str, status_code: int, now: datetime) -> bool:
        # Whoever holds the lease: a 2xx is what the receiver got, even from a sender whose lease
        # ran out meanwhile, and a delivered delivery is never claimed (sent) again.
        changed = self.session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id == delivery_id,
                   WebhookDelivery.state != DeliveryState.DELIVERED.value)
            .values(state=DeliveryState.DELIVERED.value, attempts=WebhookDelivery.attempts + 1,
                    last_status_code=status_code, last_error=None, delivered_at=now,
                    claimed_until=None)
            .execution_options(synchronize_session=False))
        return bool(changed.rowcount)  # type: ignore[attr-defined]

    def record_failure(self, delivery_id: str, lease_until: datetime, *, attempts: int,
                       status_code: int | None, error: str,
                       next_attempt_at: datetime | None) -> bool:
        """Count a failed attempt; ``next_attempt_at`` None: it was the last one. Only while the
        lease is still this sender's: a sender that outlived its lease has no say any more."""
        values: dict[str, Any] = {"attempts": attempts, "last_status_code": status_code,
                                  "last_error": error, "claimed_until": None}
        if next_attempt_at is None:
            values["state"] = DeliveryState.FAILED.value
        else:
            values["next_attempt_at"] = next_attempt_at
        changed = self.session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id == delivery_id,
                   WebhookDelivery.state == DeliveryState.PENDING.value,
                   WebhookDelivery.claimed_until == lease_until)
            .values(**values)
            .execution_options(synchronize_session=False))
        return bool(changed.rowcount)  # type: ignore[attr-defined]
