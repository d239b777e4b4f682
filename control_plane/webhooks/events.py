"""The event types a webhook can subscribe to."""

from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    PROMOTION_SUCCEEDED = "promotion.succeeded"
    PROMOTION_FAILED = "promotion.failed"
    PROMOTION_ROLLED_BACK = "promotion.rolled_back"


EVENT_TYPES: tuple[str, ...] = tuple(event.value for event in EventType)
