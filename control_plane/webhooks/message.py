"""What a receiver gets on each attempt of a delivery: the JSON body and the signed headers."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from control_plane.webhooks.signing import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    sign,
)

USER_AGENT = "llm-control-plane-webhooks/1"


def body(delivery_id: str, event_type: str, created_at: datetime, data: dict[str, Any]) -> bytes:
    """``{"id", "event", "created_at", "data"}``; the same bytes on every attempt."""
    return json.dumps({"id": delivery_id, "event": event_type,
                       "created_at": created_at.isoformat(), "data": data},
                      separators=(",", ":"), sort_keys=True).encode()


def headers(secret: str, delivery_id: str, event_type: str, content: bytes, timestamp: int
            ) -> dict[str, str]:
    return {"Content-Type": "application/json", "User-Agent": USER_AGENT,
            EVENT_HEADER: event_type, DELIVERY_HEADER: delivery_id,
            TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: sign(secret, timestamp, content)}
