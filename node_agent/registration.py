"""Telling the control plane about this node: join as it starts, leave as it stops
(``PUT``/``DELETE /api/v1/nodes/{name}/registration``)."""

from __future__ import annotations

import logging
from typing import Any

import httpx
from tenacity import (
    before_sleep_log,
    retry,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
)

from node_agent.settings import NodeSettings

log = logging.getLogger("llm_node")


class RegistrationRefused(RuntimeError):
    """The control plane answered, and said no (a bad token, a bad field): retrying won't help."""


def _retryable(error: BaseException) -> bool:
    # Not reachable yet (a control plane still starting) or a 5xx (its database restarting).
    if isinstance(error, httpx.TransportError):
        return True
    return isinstance(error, httpx.HTTPStatusError) and error.response.status_code >= 500


def registration_body(settings: NodeSettings) -> dict[str, Any]:
    host = settings.advertise_host
    return {"http_url": f"http://{host}:{settings.http_port}",
            "grpc_url": f"{host}:{settings.grpc_port}",
            "metrics_url": f"http://{host}:{settings.metrics_port}/metrics",
            "labels": settings.labels, "api_key_ref": settings.api_key_ref,
            "gpu_inventory": settings.gpu_inventory}


class Registration:
    def __init__(self, settings: NodeSettings, timeout_s: float = 10.0) -> None:
        self.settings = settings
        self.path = f"/api/v1/nodes/{settings.name}/registration"
        self.client = httpx.Client(
            base_url=settings.control_plane_url.rstrip("/"), timeout=timeout_s,
            headers={"Authorization": f"Bearer {settings.token_secret()}"})

    def close(self) -> None:
        self.client.close()

    def join(self, give_up_after_s: float = 600.0) -> dict[str, Any]:
        """Register (or refresh) this node, retrying while the control plane is unreachable."""

        @retry(retry=retry_if_exception(_retryable), stop=stop_after_delay(give_up_after_s),
               wait=wait_exponential(multiplier=0.5, max=10), reraise=True,
               before_sleep=before_sleep_log(log, logging.WARNING))
        def attempt() -> dict[str, Any]:
            response = self.client.put(self.path, json=registration_body(self.settings))
            return self._answer(response, "join")

        return attempt()

    def leave(self, give_up_after_s: float = 15.0) -> dict[str, Any]:
        """Take this node out: cordoned at once, forgotten when nothing is deployed on it."""

        @retry(retry=retry_if_exception(_retryable), stop=stop_after_delay(give_up_after_s),
               wait=wait_exponential(multiplier=0.5, max=5), reraise=True,
               before_sleep=before_sleep_log(log, logging.WARNING))
        def attempt() -> dict[str, Any]:
            return self._answer(self.client.delete(self.path), "leave")

        return attempt()

    def _answer(self, response: httpx.Response, what: str) -> dict[str, Any]:
        if response.status_code >= 500:
            response.raise_for_status()
        if response.status_code >= 400:
            raise RegistrationRefused(
                f"the control plane refused this node's {what} ({response.status_code}): "
                f"{response.text[:500]}")
        body: dict[str, Any] = response.json()
        return body
