"""The gateway's HTTP side: KServe v2 and OpenAI routes, the body limit in front of both, the
gateway's own health and metrics."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException

from gateway import kserve_http, openai_api
from gateway.errors import GatewayError
from gateway.limits import BodyLimit, error_document
from gateway.service import Gateway
from gateway.unknown_endpoints import routing_error
from gateway.upstream_http import HttpUpstream


def create_app(gateway: Gateway, upstream: HttpUpstream) -> Any:
    app = FastAPI(title="LLM inference gateway", docs_url=None, redoc_url=None,
                  openapi_url=None)

    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, exc: GatewayError) -> JSONResponse:
        return JSONResponse(error_document(request.url.path, exc), status_code=exc.http_status,
                            headers=exc.headers())

    # The router's own 404 and 405 (no endpoint raises HTTPException): what is served instead.
    @app.exception_handler(HTTPException)
    async def routing(request: Request, exc: HTTPException) -> Response:
        error = routing_error(request, exc)
        if error is None:
            return await http_exception_handler(request, exc)
        return await gateway_error(request, error)

    @app.get("/healthz")
    async def healthz() -> dict[str, object]:
        return gateway.health()

    @app.get("/metrics")
    async def metrics() -> Response:
        age = gateway.watcher.status.seconds_since_confirmed()
        gateway.metrics.routing_revision_age.set(-1 if age is None else age)
        gateway.metrics.control_plane_reachable.set(1 if gateway.watcher.status.reachable else 0)
        return Response(generate_latest(gateway.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app.include_router(openai_api.build_router(gateway, upstream))
    app.include_router(kserve_http.build_router(gateway, upstream))

    return BodyLimit(app, gateway.settings.max_body_bytes, gateway.settings.body_timeout_seconds,
                     gateway.metrics)
