"""The control plane's FastAPI application factory."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from control_plane.adapters import loading as adapter_loading
from control_plane.adapters import work as adapter_work
from control_plane.adapters.actuator import AdapterActuator
from control_plane.adapters.reconciler import AdapterReconciler
from control_plane.adapters.routes import router as adapters_router
from control_plane.auth.routes import router as auth_router
from control_plane.autoscaling.routes import router as autoscaling_router
from control_plane.autoscaling.scaler import Autoscaler
from control_plane.db import database_url, make_engine, make_session_factory, transaction
from control_plane.deployments import service as deployments
from control_plane.deployments import work as deployment_work
from control_plane.deployments.actuator import Actuator
from control_plane.deployments.reconciler import Reconciler
from control_plane.deployments.routes import router as deployments_router
from control_plane.error_handlers import error_responses, install_error_handlers
from control_plane.evacuation.evacuator import Evacuator
from control_plane.evacuation.routes import router as evacuation_router
from control_plane.gpus.monitor import GpuMonitor
from control_plane.gpus.readings import GpuInventory
from control_plane.leader import LeaderElection, LeaderLock
from control_plane.lifecycle import swap_work
from control_plane.lifecycle.routes import router as alias_moves_router
from control_plane.metrics.registry import ControlPlaneMetrics
from control_plane.nodes.dependents import NodeDependents
from control_plane.nodes.lock import NodeLocks
from control_plane.nodes.repository import NodeRepository
from control_plane.nodes.routes import router as nodes_router
from control_plane.operations.routes import router as operations_router
from control_plane.operations.runner import OperationRunner
from control_plane.promotions.driver import PromotionDriver
from control_plane.promotions.routes import router as promotions_router
from control_plane.read_cache import ChangeListener, ReadCache, watch_local_writes
from control_plane.registration_threads import RegistrationThreads
from control_plane.registry import validation
from control_plane.registry.routes import router as registry_router
from control_plane.reservations.placer import Placer
from control_plane.reservations.routes import router as placement_router
from control_plane.routing.routes import router as routing_router
from control_plane.settings import Settings
from control_plane.state_metrics import StateCollector
from control_plane.stats.poller import NodeMetricsPoller
from control_plane.stats.routes import router as stats_router
from control_plane.tenants.routes import router as tenants_router
from control_plane.triton import adapter_control, config_builder, node_control
from control_plane.triton.routes import router as triton_config_router
from control_plane.usage.routes import router as usage_router
from control_plane.webhooks import outbox
from control_plane.webhooks.routes import router as webhooks_router
from control_plane.webhooks.sender import WebhookSender

REQUEST_ID_HEADER = "X-Request-ID"
_REQUEST_ID_KEY = REQUEST_ID_HEADER.lower().encode("latin-1")
MAX_REQUEST_ID_LENGTH = 128


class RequestIdMiddleware:
    """Gives every HTTP request an id (``request.state.request_id``) and every response the header.

    A caller's id is kept so one id follows a request through proxies into the audit log. Plain
    ASGI rather than ``@app.middleware("http")``, whose wrapper runs every request through an
    extra task and memory stream."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # ASGI servers hand header names over lower-cased.
        given = next((value for key, value in scope["headers"] if key == _REQUEST_ID_KEY), b"")
        # NUL is dropped: PostgreSQL cannot store it in the audit log.
        request_id = given.decode("latin-1").replace("\x00", "")[:MAX_REQUEST_ID_LENGTH] or \
            uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
            await send(message)

        await self.app(scope, receive, send_with_id)


def node_inventories(session_factory: sessionmaker[Session], placer: Placer
                     ) -> dict[str, GpuInventory]:
    """Every node with a GPU inventory, read again at each poll: nodes come and go."""
    with transaction(session_factory, read_only=True) as session:
        nodes = NodeRepository(session).all()
        return {node.name: inventory for node in nodes
                if (inventory := placer.inventory(node)) is not None}


def node_metrics_urls(session_factory: sessionmaker[Session]) -> dict[str, str]:
    """Every node that exports metrics, read again at each poll."""
    with transaction(session_factory, read_only=True) as session:
        return {node.name: node.metrics_url for node in NodeRepository(session).all()
                if node.metrics_url}


def create_app(settings: Settings | None = None, engine: Engine | None = None) -> FastAPI:
    """Wire settings, database, routes and error handling; the schema comes from migrations."""
    settings = settings or Settings()
    owns_engine = engine is None
    engine = engine or make_engine(settings.database_url)

    session_factory = make_session_factory(engine)
    read_cache = ReadCache()
    change_listener = ChangeListener(settings.database_url, read_cache)
    metrics = ControlPlaneMetrics()
    runner = OperationRunner(session_factory, metrics=metrics,
                             lease_s=settings.operation_lease_seconds)
    runner.register(validation.KIND, validation.make_work(settings.source_roots))
    placer = Placer(session_factory, headroom_fraction=settings.gpu_headroom_fraction,
                    strategy=settings.placement_strategy, metrics=metrics)
    gpu_monitor = GpuMonitor(lambda: node_inventories(session_factory, placer),
                             interval_s=settings.gpu_poll_interval_seconds,
                             history=settings.gpu_history)
    stats_poller = NodeMetricsPoller(lambda: node_metrics_urls(session_factory),
                                     interval_s=settings.stats_poll_interval_seconds,
                                     keep_s=settings.stats_keep_seconds)
    webhook_sender = WebhookSender.from_settings(session_factory, settings, metrics)
    actuator = Actuator(session_factory, node_control.connect, config_builder.load_request,
                        placer=placer,
                        node_locks=NodeLocks(database_url(session_factory)))
    adapter_actuator = AdapterActuator(session_factory, adapter_control.connect)
    elections: list[LeaderElection] = []
    reconciler = Reconciler(actuator, interval_s=settings.reconcile_interval_seconds,
                            is_leader=lambda: bool(elections) and elections[-1].is_leader,
                            min_triton_version=settings.min_triton_version,
                            steps=[AdapterReconciler(adapter_actuator)], metrics=metrics,
                            node_down_after_misses=settings.node_down_after_missed_passes,
                            parallel_loads=settings.node_parallel_loads,
                            fleet_steps=[Evacuator(session_factory, placer,
                                                   gpu_monitor.latest_all, runner.submit,
                                                   metrics)])
    autoscaler = Autoscaler(session_factory, runner, stats_poller,
                            interval_s=settings.autoscale_interval_seconds,
                            is_leader=lambda: bool(elections) and elections[-1].is_leader,
                            metrics=metrics,
                            keep_decisions_h=settings.autoscale_keep_decisions_hours)
    # After each deployment operation the reconciler looks again at once, whatever the outcome.
    runner.register(deployments.APPLY, deployment_work.make_apply(actuator, reconciler.trigger))
    runner.register(deployments.REMOVE, deployment_work.make_remove(actuator, reconciler.trigger))
    runner.register(deployments.SWAP, swap_work.make_swap(actuator, reconciler.trigger))
    runner.register(adapter_loading.LOAD, adapter_work.make_load(adapter_actuator,
                                                                 actuator.node_lock))
    runner.register(adapter_loading.UNLOAD, adapter_work.make_unload(adapter_actuator,
                                                                     actuator.node_lock))
    promotion_driver = PromotionDriver(
        session_factory, runner, settings.source_roots, publish=outbox.publish,
        after_commit=webhook_sender.trigger,
        step_timeout_s=settings.promotion_step_timeout_seconds)

    metrics.registry.register(StateCollector(
        session_factory, gpu_monitor,
        lambda: (bool(elections) and elections[-1].is_leader) if settings.reconciler_enabled
        else None))

    # The background work runs once per app, however many servers run it (tests open a client
    # beside a uvicorn server): the first server's startup starts it, the last one's shutdown
    # stops it, in the reverse order. Stopped by whichever server stopped first, it left the
    # other serving with no runner, and its leader election running on (it contended for a lock
    # on a database that was gone, for the rest of a test session).
    servers: list[None] = []
    background = ExitStack()

    def start_background() -> None:
        if owns_engine:
            background.callback(engine.dispose)
        # Every process claims operations and adopts promotions; the database decides who runs
        # which (claims with leases, a lock per promotion), so API workers and replicas can be
        # added freely.
        if settings.read_cache:
            background.callback(watch_local_writes(engine, read_cache))
            change_listener.start()
            background.callback(change_listener.stop)
        runner.start()
        background.callback(runner.shutdown)
        promotion_driver.start()
        background.callback(promotion_driver.shutdown)
        # Every replica runs its own sender; leases on the deliveries keep two senders from
        # posting one at once.
        for poller in (gpu_monitor, stats_poller, webhook_sender):
            poller.start()
            background.callback(poller.stop)
        if settings.reconciler_enabled:
            # Of several replicas on one database, only the elected one reconciles; the others
            # serve the API and take over when it dies (PostgreSQL advisory lock; a file lock
            # beside SQLite).
            election = LeaderElection(LeaderLock(settings.database_url, "reconciler"),
                                      on_elected=reconciler.trigger, on_deposed=lambda: None)
            elections.append(election)
            background.callback(elections.remove, election)
            for worker in (reconciler, autoscaler, election):
                worker.start()
                background.callback(worker.stop)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        servers.append(None)
        # A start that fails part-way stops what it started, and the server is not counted: the
        # pieces started before the failure used to run on unowned, and the next server's startup
        # (counting this one) started nothing.
        try:
            if len(servers) == 1:
                start_background()
            yield
        finally:
            servers.pop()
            if not servers:
                background.close()

    app = FastAPI(title="LLM control plane", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.version_config_check = config_builder.check
    app.state.node_dependents = NodeDependents(deployments.server_versions,
                                               deployments.check_node_removable)
    app.state.metrics = metrics
    app.state.session_factory = session_factory
    app.state.read_cache = read_cache
    app.state.registration_threads = RegistrationThreads(settings.api_registration_threads)
    app.state.operation_runner = runner
    app.state.promotion_driver = promotion_driver
    app.state.reconciler = reconciler
    app.state.autoscaler = autoscaler
    app.state.placer = placer
    app.state.gpu_monitor = gpu_monitor
    app.state.stats_poller = stats_poller
    app.state.webhook_sender = webhook_sender
    app.state.elections = elections
    install_error_handlers(app)

    app.add_middleware(RequestIdMiddleware)

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

    @app.get("/metrics", tags=["health"], response_class=Response)
    def prometheus_metrics() -> Response:
        """Prometheus metrics (no token: scrape it from the internal network only)."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app.include_router(registry_router, prefix="/api/v1")
    app.include_router(alias_moves_router, prefix="/api/v1")
    app.include_router(triton_config_router, prefix="/api/v1")
    app.include_router(nodes_router, prefix="/api/v1")
    app.include_router(deployments_router, prefix="/api/v1")
    app.include_router(adapters_router, prefix="/api/v1")
    app.include_router(operations_router, prefix="/api/v1")
    app.include_router(placement_router, prefix="/api/v1")
    app.include_router(auth_router, prefix="/api/v1")
    app.include_router(promotions_router, prefix="/api/v1")
    app.include_router(webhooks_router, prefix="/api/v1")
    app.include_router(tenants_router, prefix="/api/v1")
    app.include_router(routing_router, prefix="/api/v1")
    app.include_router(usage_router, prefix="/api/v1")
    app.include_router(stats_router, prefix="/api/v1")
    app.include_router(autoscaling_router, prefix="/api/v1")
    app.include_router(evacuation_router, prefix="/api/v1")
    return app
