"""JSON shapes of webhooks: subscriptions (the secret appears once) and their deliveries."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import (
    AfterValidator,
    AnyHttpUrl,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    UrlConstraints,
)

from control_plane.webhooks.events import EVENT_TYPES, EventType
from control_plane.webhooks.orm import (
    MAX_URL_LENGTH,
    DeliveryState,
    WebhookDelivery,
    WebhookSubscription,
)


def _fits_column(url: AnyHttpUrl) -> AnyHttpUrl:
    # Normalising can lengthen a URL (percent-encoding, a trailing slash): the stored form counts.
    if len(str(url)) > MAX_URL_LENGTH:
        raise ValueError(f"is longer than {MAX_URL_LENGTH} characters once normalised")
    return url


def _known_events(value: object) -> object:
    # Before the enum's own check, whose message lists the valid names but not the wrong one.
    if isinstance(value, list):
        unknown = [item for item in value if isinstance(item, str) and item not in EVENT_TYPES]
        if unknown:
            raise ValueError(f"unknown event type(s) {', '.join(repr(u) for u in unknown)}; "
                             f"subscribe to one or more of {', '.join(EVENT_TYPES)}")
    return value


def _unique(events: list[EventType]) -> list[EventType]:
    return list(dict.fromkeys(events))


WebhookUrl = Annotated[AnyHttpUrl, UrlConstraints(max_length=MAX_URL_LENGTH),
                       AfterValidator(_fits_column)]
# The length is checked on the list as sent, as the OpenAPI schema says, before duplicates go.
Events = Annotated[list[EventType],
                   Field(min_length=1, max_length=len(EVENT_TYPES),
                         description="event types to receive: " + ", ".join(EVENT_TYPES)),
                   BeforeValidator(_known_events), AfterValidator(_unique)]
# No NUL: PostgreSQL cannot store one.
Description = Annotated[str, StringConstraints(max_length=500, pattern=r"^[^\x00]*$")]


class WebhookCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: WebhookUrl = Field(description="where deliveries are POSTed (http or https)")
    events: Events
    description: Description | None = None


class WebhookOut(BaseModel):
    id: str
    url: str
    events: list[EventType]
    description: str | None
    active: bool
    created_by: str
    created_at: datetime

    @classmethod
    def of(cls, subscription: WebhookSubscription) -> WebhookOut:
        return cls(id=subscription.id, url=subscription.url,
                   events=[EventType(e) for e in subscription.events],
                   description=subscription.description, active=subscription.active,
                   created_by=subscription.created_by, created_at=subscription.created_at)


class WebhookCreated(WebhookOut):
    secret: str = Field(description="signs every delivery (X-LLMCP-Signature); shown only here")

    @classmethod
    def of(cls, subscription: WebhookSubscription) -> WebhookCreated:
        return cls(**WebhookOut.of(subscription).model_dump(), secret=subscription.secret)


class DeliveryOut(BaseModel):
    id: str = Field(description="the X-LLMCP-Delivery id the receiver saw, on every attempt")
    event_id: str
    event_type: EventType
    state: DeliveryState
    attempts: int
    last_status_code: int | None
    last_error: str | None
    next_attempt_at: datetime | None = Field(description="while pending: when it is tried next")
    delivered_at: datetime | None
    created_at: datetime

    @classmethod
    def of(cls, delivery: WebhookDelivery, event_type: str) -> DeliveryOut:
        pending = delivery.state == DeliveryState.PENDING.value
        return cls(id=delivery.id, event_id=delivery.event_id, event_type=EventType(event_type),
                   state=DeliveryState(delivery.state), attempts=delivery.attempts,
                   last_status_code=delivery.last_status_code, last_error=delivery.last_error,
                   next_attempt_at=delivery.next_attempt_at if pending else None,
                   delivered_at=delivery.delivered_at, created_at=delivery.created_at)
