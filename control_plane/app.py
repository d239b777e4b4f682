"""The control plane's FastAPI application factory."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from sqlalchemy import Engine, text

from control_plane.auth.routes import router as auth_router
from control_plane.db import make_engine, make_session_factory
from control_plane.error_handlers import error_responses, install_error_handlers
from control_plane.nodes.routes import router as nodes_router
from control_plane.operations.routes import router as operations_router
from control_plane.operations.runner import OperationRunner
from control_plane.registry import validation
from control_plane.registry.routes import router as registry_router
from control_plane.settings import Settings

REQUEST_ID_HEADER = "X-Request-ID"


def create_app(settings: Settings | None = None, engine: Engine | None = None) -> FastAPI:
    """Wire settings, database, routes and error handling; the schema comes from migrations."""
    settings = settings or Settings()
    owns_engine = engine is None
    engine = engine or make_engine(settings.database_url)

    session_factory = make_session_factory(engine)
    runner = OperationRunner(session_factory)
    runner.register(validation.KIND, validation.make_work(settings.source_roots))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        runner.start()
        yield
        runner.shutdown()
        if owns_engine:
            engine.dispose()

    app = FastAPI(title="LLM control plane", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.session_factory = session_factory
    app.state.operation_runner = runner
    install_error_handlers(app)

    @app.middleware("http")
    async def assign_request_id(request: Request,
                                call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        # A caller's id is kept so one id follows a request through proxies into the audit log.
        request.state.request_id = request.headers.get(REQUEST_ID_HEADER, "")[:128] or \
            uuid.uuid4().hex
        response = await call_next(request)
        response.headers[REQUEST_ID_HEADER] = request.state.request_id
        return response

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], responses=error_responses(503))
    def readyz() -> dict[str, str]:
        """Readiness: the database answers."""
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        return {"status": "ready"}

    app.include_router(registry_router, prefix="/api/v1")
    app.include_router(nodes_router, prefix="/api/v1")
    app.include_router(operations_router, prefix="/api/v1")
    app.include_router(auth_router, prefix="/api/v1")
    return app
