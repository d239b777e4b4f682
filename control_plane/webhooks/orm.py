"""The tables of webhooks: subscriptions, the outbox of events, and one delivery per event and
subscription with its attempts and outcome."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from control_plane.db import Base, UTCDateTime, utcnow

MAX_URL_LENGTH = 2048


class DeliveryState(StrEnum):
    """pending → delivered (a 2xx) | failed (every attempt failed); never back."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class WebhookSubscription(Base):
    __tablename__ = "webhook_subscriptions"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    url: Mapped[str] = mapped_column(String(MAX_URL_LENGTH))
    # Event type names (control_plane.webhooks.events); few subscriptions, so publish reads them
    # all and matches in Python rather than querying inside JSON differently on each backend.
    events: Mapped[list[str]] = mapped_column(JSON)
    # Stored in the clear, unlike API tokens: every delivery is signed with it. It is shown to
    # the caller once, in the response that creates the subscription.
    secret: Mapped[str] = mapped_column(String(128))
    description: Mapped[str | None] = mapped_column(String(500))
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class WebhookEvent(Base):
    """The outbox: written in the transaction of the change it reports, so it exists iff the
    change committed, and it outlives the process that wrote it."""

    __tablename__ = "webhook_events"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    event_type: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class WebhookDelivery(Base):
    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("event_id", "subscription_id"),
        # What the sender polls: pending deliveries whose next attempt is due.
        Index(None, "state", "next_attempt_at"),
        # What GET /webhooks/{id}/deliveries reads, newest first.
        Index(None, "subscription_id", "created_at"),
    )

    # The id the receiver sees (X-LLMCP-Delivery and the body's "id"): the same on every attempt,
    # so a receiver de-duplicates on it.
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    event_id: Mapped[str] = mapped_column(ForeignKey("webhook_events.id", ondelete="CASCADE"))
    subscription_id: Mapped[str] = mapped_column(
        ForeignKey("webhook_subscriptions.id", ondelete="CASCADE"))
    state: Mapped[str] = mapped_column(String(16), default=DeliveryState.PENDING.value)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # A lease: the sender that set it alone may attempt the delivery until then, so two senders
    # (threads or replicas) never post one delivery at the same time.
    claimed_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
