"""Carrying out one adapter action on one deployment's engine, and recording what happened.

Operations (load, unload) and the reconciler both act through this, so a wanted adapter's state
changes in one place, always by a guarded transition: loading while the backend loads it, loaded
only once the backend's answer lists it, failed with the backend's reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from control_plane.adapters.orm import AdapterState, DeploymentAdapter
from control_plane.adapters.repository import DeploymentAdapterRepository
from control_plane.auth import audit
from control_plane.auth.scopes import Actor, Scope
from control_plane.db import transaction
from control_plane.errors import (
    AdapterRefused,
    ControlPlaneError,
    NodeUnavailable,
    PreconditionFailed,
)
from control_plane.triton.adapter_protocol import (
    AdapterControl,
    AdapterControlFactory,
    AdapterListing,
    AdapterRequestRefused,
)
from control_plane.triton.protocol import NodeUnreachable
from control_plane.triton.specs import NodeEndpoint

log = logging.getLogger(__name__)
# One control request, given the node's control.
_Request = Callable[[AdapterControl], AdapterListing]


@dataclass(frozen=True)
class AdapterTarget:
    """One wanted adapter and where it goes, as read before acting."""

    row_id: int
    deployment_id: int
    node_id: int
    endpoint: NodeEndpoint
    triton_name: str
    name: str
    path: str
    version: int
    state: AdapterState

    @property
    def where(self) -> str:
        return f"'{self.triton_name}' on node '{self.endpoint.name}'"


def target_of(row: DeploymentAdapter) -> AdapterTarget:
    deployment, node, adapter = row.deployment, row.deployment.node, row.adapter
    return AdapterTarget(
        row_id=row.id, deployment_id=deployment.id, node_id=deployment.node_id,
        endpoint=NodeEndpoint(node.name, node.http_url, node.grpc_url, node.api_key_ref),
        triton_name=deployment.triton_name, name=adapter.name, path=adapter.source,
        version=adapter.version.number, state=AdapterState(row.state))


class AdapterActuator:
    def __init__(self, session_factory: sessionmaker[Session], control_for: AdapterControlFactory
                 ) -> None:
        self.session_factory = session_factory
        self.control_for = control_for

    def target(self, row_id: int) -> AdapterTarget:
        with transaction(self.session_factory, read_only=True) as session:
            row = DeploymentAdapterRepository(session).get(row_id)
            if row is None:
                raise PreconditionFailed(f"wanted adapter {row_id} no longer exists (its "
                                         "deployment or adapter was removed)")
            return target_of(row)

    def listing(self, endpoint: NodeEndpoint, triton_name: str) -> AdapterListing:
        """What the deployment's engine holds; raises NodeUnavailable or AdapterRefused."""
        return self._call(endpoint, triton_name, "list",
                          lambda control: control.list(triton_name))

    def load(self, target: AdapterTarget, actor: str) -> AdapterListing:
        """Load the adapter into the deployment's engine and record the outcome; raises
        AdapterRefused or NodeUnavailable (the adapter is then failed, with the reason)."""
        current = target.state
        # A loaded one stays loaded (and routed) while a load confirms it: the backend answers a
        # load of what it holds without doing anything.
        if current not in (AdapterState.LOADING, AdapterState.LOADED):
            self._transition(target, current, AdapterState.LOADING, actor, error=None)
            current = AdapterState.LOADING
        try:
            listing = self._call(target.endpoint, target.triton_name, "load", lambda control:
                                 control.load(target.triton_name, target.name, target.path))
            if target.name not in listing.names:
                raise AdapterRefused(f"the backend of {target.where} answered the load of "
                                     f"'{target.name}' without listing it")
        except ControlPlaneError as exc:
            self._transition(target, current, AdapterState.FAILED, actor,
                             error=f"loading failed: {exc.message}")
            raise
        self._transition(target, current, AdapterState.LOADED, actor, error=None)
        return listing

    def unload(self, target: AdapterTarget, actor: str) -> AdapterListing:
        """Unload the adapter from the deployment's engine and forget it; on failure it stays
        unloading, with the reason (the reconciler tries again)."""
        try:
            listing = self._call(target.endpoint, target.triton_name, "unload",
                                 lambda control: control.unload(target.triton_name, target.name))
        except ControlPlaneError as exc:
            with transaction(self.session_factory) as session:
                row = DeploymentAdapterRepository(session).get(target.row_id)
                if row is not None and row.state == AdapterState.UNLOADING:
                    DeploymentAdapterRepository(session).set_fields(
                        row, error=f"unloading failed: {exc.message}", updated_by=actor)
            raise
        self.forget(target, AdapterState.UNLOADING)
        return listing

    def carry(self, target: AdapterTarget, to_version: int, actor: str) -> AdapterTarget:
        """Want version ``to_version``'s adapter of the target's name on the deployment instead
        (audited), and return the new target, loading."""
        with transaction(self.session_factory) as session:
            repository = DeploymentAdapterRepository(session)
            row = repository.get(target.row_id)
            if row is None or not repository.carry(row.id, row.adapter_id,
                                                   row.deployment.model_id, to_version, actor):
                raise PreconditionFailed(f"adapter '{target.name}' on {target.where} changed "
                                         f"while being carried to version {to_version}")
            audit.record(session, Actor(name=actor, scope=Scope.WRITE), "adapter.carry",
                         "deployment_adapter", f"{row.deployment.model.name}/"
                         f"{row.deployment.alias}@{target.endpoint.name}/{target.name}",
                         before={"version": target.version, "state": target.state.value},
                         after={"version": to_version, "state": AdapterState.LOADING.value})
            return target_of(repository.get(target.row_id))  # type: ignore[arg-type]

    def mark(self, target: AdapterTarget, state: AdapterState, actor: str,
             error: str | None = None) -> None:
        self._transition(target, target.state, state, actor, error=error)

    def forget(self, target: AdapterTarget, expected: AdapterState) -> None:
        with transaction(self.session_factory) as session:
            if not DeploymentAdapterRepository(session).forget(target.row_id, expected):
                log.info("adapter '%s' on %s changed while being forgotten; left as it is",
                         target.name, target.where)

    def _call(self, endpoint: NodeEndpoint, triton_name: str, action: str,
              request: _Request) -> AdapterListing:
        # Raises NodeUnavailable itself when the node's repository key cannot be read.
        control = self.control_for(endpoint)
        try:
            return request(control)
        except NodeUnreachable as exc:
            raise NodeUnavailable(f"node '{endpoint.name}' did not answer the adapter {action} "
                                  f"request to '{triton_name}': {exc}") from exc
        except AdapterRequestRefused as exc:
            raise AdapterRefused(f"the backend of '{triton_name}' on node '{endpoint.name}' "
                                 f"refused the adapter {action}: {exc.reason}") from exc

    def _transition(self, target: AdapterTarget, expected: AdapterState, new: AdapterState,
                    actor: str, **fields: object) -> None:
        with transaction(self.session_factory) as session:
            if not DeploymentAdapterRepository(session).transition(target.row_id, expected, new,
                                                                   actor, **fields):
                raise PreconditionFailed(f"adapter '{target.name}' on {target.where} changed "
                                         f"while becoming {new}; it is handled elsewhere")
