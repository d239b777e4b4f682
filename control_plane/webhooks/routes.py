"""REST endpoints of webhooks (admin only): translate between JSON and service calls."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from control_plane.auth.dependencies import Admin
from control_plane.dependencies import DbSession
from control_plane.error_handlers import error_responses
from control_plane.pagination import Limit, Offset, Page
from control_plane.webhooks import service
from control_plane.webhooks.orm import DeliveryState
from control_plane.webhooks.schemas import DeliveryOut, WebhookCreate, WebhookCreated, WebhookOut

router = APIRouter(prefix="/webhooks", tags=["webhooks"],
                   responses=error_responses(401, 403, 422, 503))

WebhookId = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$")]


@router.post("", status_code=status.HTTP_201_CREATED)
def create_webhook(body: WebhookCreate, session: DbSession, actor: Admin) -> WebhookCreated:
    """Subscribe a URL to events; the response is the only place its signing secret appears."""
    return WebhookCreated.of(service.create_subscription(session, actor, body))


@router.get("")
def list_webhooks(session: DbSession, _: Admin, limit: Limit = 50, offset: Offset = 0
                  ) -> Page[WebhookOut]:
    """Subscriptions, newest first (without their secrets)."""
    subscriptions, total = service.list_subscriptions(session, limit, offset)
    return Page(items=[WebhookOut.of(s) for s in subscriptions], total=total, limit=limit,
                offset=offset)


@router.get("/{webhook_id}", responses=error_responses(404))
def get_webhook(webhook_id: WebhookId, session: DbSession, _: Admin) -> WebhookOut:
    return WebhookOut.of(service.get_subscription(session, webhook_id))


@router.delete("/{webhook_id}", status_code=status.HTTP_204_NO_CONTENT,
               responses=error_responses(404))
def delete_webhook(webhook_id: WebhookId, session: DbSession, actor: Admin) -> Response:
    """Unsubscribe; deliveries still pending are dropped with it."""
    service.delete_subscription(session, actor, webhook_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{webhook_id}/deliveries", responses=error_responses(404))
def list_deliveries(webhook_id: WebhookId, session: DbSession, _: Admin,
                    state: DeliveryState | None = None, limit: Limit = 50, offset: Offset = 0
                    ) -> Page[DeliveryOut]:
    """Deliveries to this subscription with their outcomes, newest first."""
    deliveries, total = service.list_deliveries(session, webhook_id, state, limit, offset)
    return Page(items=[DeliveryOut.of(d, event_type) for d, event_type in deliveries],
                total=total, limit=limit, offset=offset)
