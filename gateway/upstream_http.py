"""Sending a request to a node over HTTP, with one retry on another node for a request that
fails before its first response, and a clear end for one that fails after it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx

from gateway.errors import GatewayError, NoNodeAvailable
from gateway.routing.table import Endpoint, Route
from gateway.service import Gateway

# What Triton or our backend answer for a model that is not (or no longer) there: the node is
# the wrong place for this request, and another node may serve it.
UNAVAILABLE_HINTS = ("unknown model", "not ready", "unavailable", "unloading",
                     "no available versions")
ATTEMPTS = 2


class FirstResponseTimeout(GatewayError):
    http_status = 504
    grpc_code = "DEADLINE_EXCEEDED"


def node_unavailable(status: int, text: str) -> bool:
    if status in (502, 503):
        return True
    return status in (400, 404) and any(hint in text.lower() for hint in UNAVAILABLE_HINTS)


def mid_stream_error(endpoint: Endpoint, exc: BaseException) -> bytes:
    """An SSE event ending a stream whose node failed; the blank line first closes any partial
    event the node was cut off in."""
    message = (f"the node serving this request ({endpoint.node}) failed mid-stream "
               f"({type(exc).__name__}); the output so far is incomplete: retry the request")
    return b"\n\ndata: " + json.dumps({"error": message}).encode() + b"\n\n"


@dataclass
class Upstream:
    """A node's answer: its status, its first bytes, and the rest as they come."""

    status: int
    first: bytes
    endpoint: Endpoint
    response: httpx.Response | None = None
    chunks: AsyncIterator[bytes] | None = None
    retried: bool = False
    _closed: bool = field(default=False, repr=False)

    async def rest(self) -> AsyncIterator[bytes]:
        if self.chunks is None:
            return
        try:
            async for chunk in self.chunks:
                yield chunk
        except httpx.TransportError as exc:
            yield mid_stream_error(self.endpoint, exc)


class HttpUpstream:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
        self.client = httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(
            10.0, read=gateway.settings.first_response_timeout_seconds))

    async def open(self, route: Route, protocol: str, path: str, body: bytes) -> Upstream:
        """POST ``body`` to ``/v2/models/<triton model>/<path>`` on a node; the caller must
        ``close()`` the result."""
        gateway = self.gateway
        tried: frozenset[str] = frozenset()
        errors: list[str] = []
        for attempt in range(ATTEMPTS):
            endpoint = gateway.pick(route, tried)
            tried |= {endpoint.http_url}
            if attempt:
                gateway.metrics.retries.labels(protocol, route.name).inc()
            gateway.balancer.started(endpoint)
            response: httpx.Response | None = None
            try:
                request = self.client.build_request(
                    "POST", f"http://{endpoint.http_url}/v2/models/{endpoint.triton_model}/{path}",
                    content=body, headers={"Content-Type": "application/json"})
                response = await self.client.send(request, stream=True)
                if response.status_code != 200:
                    text = await response.aread()
                    if node_unavailable(response.status_code, text.decode(errors="replace")):
                        raise _NodeRefused(f"{response.status_code} {text[:200]!r}")
                    upstream = Upstream(response.status_code, text, endpoint, response,
                                        retried=attempt > 0)
                    return upstream
                chunks = response.aiter_raw()
                timeout = gateway.settings.first_response_timeout_seconds
                try:
                    first = await asyncio.wait_for(anext(chunks, b""), timeout)
                except TimeoutError:
                    await self._release(endpoint, response)
                    raise FirstResponseTimeout(
                        f"no response from {route.name} within {timeout:.0f} s (queued on node "
                        f"{endpoint.node}); retry later or with a more urgent priority") from None
                return Upstream(200, first, endpoint, response, chunks, retried=attempt > 0)
            except (httpx.TransportError, _NodeRefused) as exc:
                await self._release(endpoint, response)
                detail = f"{type(exc).__name__}: {exc}"
                gateway.node_failed(endpoint, detail)
                errors.append(f"{endpoint.node}: {detail}")
        raise NoNodeAvailable(f"model '{route.name}' failed on {len(errors)} node(s) before its "
                              f"first response ({'; '.join(errors)}); retry shortly")

    async def close(self, upstream: Upstream) -> None:
        if not upstream._closed:
            upstream._closed = True
            await self._release(upstream.endpoint, upstream.response)

    async def _release(self, endpoint: Endpoint, response: httpx.Response | None) -> None:
        self.gateway.balancer.finished(endpoint)
        if response is not None:
            await response.aclose()

    async def get(self, route: Route, suffix: str) -> httpx.Response:
        """A metadata read (ready, metadata, config) from one node serving the route."""
        tried: frozenset[str] = frozenset()
        last: Exception | None = None
        for _ in range(ATTEMPTS):
            endpoint = self.gateway.pick(route, tried)
            tried |= {endpoint.http_url}
            try:
                return await self.client.get(
                    f"http://{endpoint.http_url}/v2/models/{endpoint.triton_model}{suffix}",
                    timeout=10.0)
            except httpx.TransportError as exc:
                self.gateway.node_failed(endpoint, f"{type(exc).__name__}: {exc}")
                last = exc
        raise NoNodeAvailable(f"model '{route.name}': no node answered ({last}); retry shortly")

    async def aclose(self) -> None:
        await self.client.aclose()


class _NodeRefused(Exception):
    """The node answered that it does not serve the model (now)."""
