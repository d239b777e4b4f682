"""The gateway's shared state and decisions: who is calling, which route, which node, and whether
a prompt can fit at all. The protocol modules (KServe HTTP, gRPC, OpenAI) translate; this decides."""

from __future__ import annotations

import asyncio
import difflib
import socket
import time
from collections.abc import Coroutine
from typing import Any

import httpx

from gateway.auth import authenticate, authorize
from gateway.errors import BadRequest, GatewayError, ModelNotFound, NoNodeAvailable, RateLimited
from gateway.metrics import GatewayMetrics
from gateway.prompt_tokens import Prompt, PromptTokens
from gateway.quotas.admission import Grant, QuotaGate
from gateway.quotas.policy import scopes_for
from gateway.routing.balancer import Balancer
from gateway.routing.monitor import NodeMonitor
from gateway.routing.table import Endpoint, Route, RoutingTable, Tenant, split_adapter
from gateway.routing.watcher import RoutingWatcher
from gateway.settings import GatewaySettings
from gateway.usage import UsageRecorder, http_poster


class Gateway:
    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.metrics = GatewayMetrics()
        self.balancer = Balancer(settings.routing_policy, settings.ejection_base_seconds,
                                 settings.ejection_max_seconds)
        token = settings.control_plane_token
        self.watcher = RoutingWatcher(settings.control_plane_url,
                                      token.get_secret_value() if token else None,
                                      settings.routing_wait_seconds, on_change=self._table_changed)
        self.monitor = NodeMonitor(self.balancer, self.metrics, lambda: self.table,
                                   settings.node_poll_interval_seconds)
        secret = settings.gateway_secret
        self.gateway_secret = secret.get_secret_value() if secret else None
        self.redis = None
        primary = None
        if settings.redis_url:
            # Imported only when configured: a gateway without Redis needs no client.
            from gateway.quotas.redis_store import redis_counters
            primary, self.redis = redis_counters(settings.redis_url,
                                                 settings.redis_timeout_seconds)
        self._finishing: set[asyncio.Future[None]] = set()
        self.usage_client = httpx.AsyncClient()
        self.usage = UsageRecorder(
            http_poster(self.usage_client, settings.control_plane_url,
                        token.get_secret_value() if token else None),
            f"{socket.gethostname()}:{settings.http_port}", settings.usage_flush_seconds,
            on_lost=lambda n: self.metrics.usage_lost.inc(n))
        self.prompt_tokens = PromptTokens(settings.control_plane_url,
                                          token.get_secret_value() if token else None,
                                          self.metrics.prompt_token_fallbacks,
                                          cache_size=settings.tokenizer_cache_size)
        self.quotas = QuotaGate(primary, settings.limits_failure_mode,
                                on_store_state=lambda up: self.metrics.limit_store_up.set(
                                    1 if up else 0),
                                default_max_tokens=settings.default_max_tokens)

    @property
    def table(self) -> RoutingTable:
        return self.watcher.table

    def _table_changed(self, table: RoutingTable) -> None:
        self.balancer.update(table.endpoints())

    def caller(self, key: str | None) -> Tenant:
        self._require_table()
        return authenticate(self.table, key, self.settings.anonymous_tenant)

    def route_for(self, tenant: Tenant, name: str) -> Route:
        """The route of a served name (``M``, ``M.<alias>``, either with ``:<adapter>``) that
        the tenant may use; a tenant allowed ``M`` may use each of its adapters."""
        self._require_table()
        base, adapter = split_adapter(name)
        route = self.table.route(base)
        if route is None:
            usable = [r.name for r in self.table.routes.values() if tenant.may_use(r)]
            close = difflib.get_close_matches(base, usable, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ModelNotFound(f"model '{base}' is not served here{hint} (served: "
                                f"{', '.join(sorted(usable)) or 'none'})")
        # Before the adapter: a tenant not allowed the model learns nothing of its adapters.
        authorize(tenant, route)
        return route if adapter is None else self._adapter_route(route, adapter)

    @staticmethod
    def _adapter_route(route: Route, adapter: str) -> Route:
        if not adapter:
            raise BadRequest(f"model '{route.name}:' names no adapter after the ':'; send "
                             f"'{route.name}' for the base model or '{route.name}:<adapter>'")
        chosen = route.with_adapter(adapter)
        # With no node serving the model at all, which adapters it has is unknown: the same
        # "unavailable, retry shortly" as for the model itself, not a claim that it is absent.
        if chosen.endpoints or not route.endpoints:
            return chosen
        loaded = route.adapters()
        close = difflib.get_close_matches(adapter, loaded, n=3)
        hint = f"; did you mean {', '.join(f'{route.name}:{c}' for c in close)}?" if close else ""
        todo = "use one of those, or ask" if loaded else "ask"
        raise ModelNotFound(f"adapter '{adapter}' is not loaded for model '{route.name}' on any "
                            f"node{hint} (loaded for {route.name}: {', '.join(loaded) or 'none'}); "
                            f"{todo} an operator to load it")

    def check_prompt_bytes(self, route: Route, prompt: Prompt, field: str) -> None:
        """Refuse a prompt whose bytes alone prove it cannot fit the context: every token covers
        at most ``max_bytes_per_token`` bytes, so it has at least this many tokens. A prompt
        the backend is asked to truncate may be longer (the backend checks the same)."""
        if route.max_model_len is None or prompt.truncate is not None:
            return
        limit = route.max_model_len * self.settings.max_bytes_per_token
        if prompt.size > limit:
            self.metrics.body_refusals.labels("any", "prompt_bytes").inc()
            raise BadRequest(
                f"{field} is {prompt.size} bytes: more than {route.name}'s context of "
                f"{route.max_model_len} tokens can hold (at most {limit} bytes); shorten it")

    async def admit(self, tenant: Tenant, route: Route, prompt: Prompt,
                    max_tokens: int | None, choices: int = 1) -> Grant:
        """Hold the request to the tenant's limits (RateLimited, with when to retry); settle
        the grant with ``settle`` when the request ends, whatever the outcome."""
        scopes = scopes_for(tenant.name, tenant.limits, tenant.model_limits, route.model)
        if not scopes:
            return Grant(None)
        # Only token limits need the count: other tenants' prompts are never tokenized here.
        counted = (await self.prompt_tokens.count(route, prompt)
                   if any(scope.limits.limits_tokens for scope in scopes) else None)
        if counted is not None:
            reserved = least = counted
        else:
            # Each token covers at least one byte and at most max_bytes_per_token: the prompt's
            # bytes bound its tokens from above (reserved) and below (for "can never fit").
            reserved = prompt.kept(prompt.size, route.max_model_len)
            least = prompt.kept(-(-prompt.size // self.settings.max_bytes_per_token),
                                route.max_model_len)
        started = time.perf_counter()
        try:
            grant = await self.quotas.admit(
                scopes, reserved * choices,
                None if max_tokens is None else max_tokens * choices, least * choices)
        except RateLimited as refusal:
            self.metrics.limit_refusals.labels(tenant.name, refusal.limit).inc()
            self.usage.refused(tenant.name, route.model, refusal.limit)
            raise
        except GatewayError as refusal:  # can never fit, or limits unavailable
            self.usage.refused(tenant.name, route.model, refusal.kind)
            raise
        finally:
            self.metrics.limit_check.observe(time.perf_counter() - started)
        return grant

    async def settle(self, tenant: Tenant, route: Route, grant: Grant, prompt_tokens: int,
                     output_tokens: int, reached_node: bool = True) -> None:
        """The request ended (``reached_node`` False: before any node had it): its usage is
        counted and its limits settled to the backend's counts."""
        await self.quotas.settle(grant, prompt_tokens + output_tokens)
        # Counted once the limits are settled: a reader of these sees settled limits.
        if reached_node:
            self.usage.served(tenant.name, route.model, prompt_tokens, output_tokens)
            self.metrics.tenant_tokens.labels(tenant.name, "prompt").inc(prompt_tokens)
            self.metrics.tenant_tokens.labels(tenant.name, "output").inc(output_tokens)

    def finish_later(self, work: Coroutine[Any, Any, None]) -> None:
        """Run a request's end (close its upstream, settle it) whatever happens to the task that
        served it: a client that drops a stream cancels that task, and every await in its
        cleanup would be cancelled too."""
        task = asyncio.ensure_future(work)
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)

    def pick(self, route: Route, tried: frozenset[str]) -> Endpoint:
        endpoint = self.balancer.pick(route.endpoints, time.monotonic(), exclude=tried)
        if endpoint is None:
            where = "no node serves it" if not route.endpoints else "every node serving it failed"
            raise NoNodeAvailable(f"model '{route.name}' is unavailable: {where}; retry shortly")
        self.metrics.node_picks.labels(endpoint.node, route.name).inc()
        return endpoint

    def node_failed(self, endpoint: Endpoint, error: str) -> None:
        self.monitor.eject(endpoint, error)

    def _require_table(self) -> None:
        if not self.watcher.loaded.is_set():
            raise NoNodeAvailable("the gateway has not read its routing table from the control "
                                  f"plane yet ({self.watcher.status.error or 'starting'}); "
                                  "retry shortly")

    def health(self) -> dict[str, object]:
        status = self.watcher.status
        age = status.seconds_since_confirmed()
        now = time.monotonic()
        return {
            "routing": {
                "revision": status.revision,
                "control_plane": "reachable" if status.reachable else "unreachable",
                # Fail static: with the control plane away, the last table keeps serving.
                "serving_last_known_table": not status.reachable and bool(status.revision),
                "seconds_since_confirmed": None if age is None else round(age, 1),
                "error": status.error or None,
            },
            "models": {
                route.name: [
                    {"node": e.node, "triton_model": e.triton_model,
                     "adapters": sorted(e.adapters),
                     "ejected": self.balancer.state(e).ejected(now),
                     "verified": self.balancer.state(e).verified,
                     "outstanding": self.balancer.state(e).outstanding,
                     "waiting": self.balancer.state(e).waiting,
                     "last_error": self.balancer.state(e).last_error or None}
                    for e in route.endpoints]
                for route in self.table.routes.values()
            },
        }
