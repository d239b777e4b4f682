"""Carrying out one action on one deployment, and recording what happened.

Operations (apply, remove, swap) and the reconciler both act through this, so a deployment's
state changes in one place, always by a guarded transition, and every Triton call is bracketed by
the states that tell the truth about it: LOADING while a load runs, READY only once Triton says
so, UNKNOWN when the node did not answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import database_url, transaction
from control_plane.deployments.booking import GpuBooker
from control_plane.deployments.orm import Deployment, DeploymentState, NodeHealth
from control_plane.deployments.repository import DeploymentRepository
from control_plane.deployments.states import sources_of
from control_plane.errors import (
    ControlPlaneError,
    DeploymentFailed,
    NodeUnavailable,
    PlacementRefused,
    PreconditionFailed,
)
from control_plane.nodes.lock import NodeLock, NodeLocks
from control_plane.placement.model import Placement
from control_plane.registry.repository import VersionRepository
from control_plane.triton.protocol import (
    LoadRejected,
    NodeUnreachable,
    TritonControl,
    TritonControlError,
)
from control_plane.triton.specs import NodeEndpoint, VersionSpec

log = logging.getLogger(__name__)


class Renderer(Protocol):
    """Builds ``load_model``'s config JSON and files for a version under a Triton model name,
    placed as ``placement`` says (``control_plane.triton.config_builder.load_request``)."""

    def __call__(self, triton_name: str, spec: VersionSpec, placement: Placement | None = None,
                 simulated: bool = False) -> tuple[str, dict[str, bytes]]: ...


ControlFactory = Callable[[NodeEndpoint], TritonControl]


class Actuator:
    def __init__(self, session_factory: sessionmaker[Session], control_for: ControlFactory,
                 render: Renderer, unload_wait_s: float = 120.0, placer: GpuBooker | None = None,
                 node_locks: NodeLocks | None = None) -> None:
        self.session_factory = session_factory
        self.control_for = control_for
        self.render = render
        # Without one (tests of the lifecycle alone), versions load with the config's own
        # instance group and nothing is booked.
        self.placer = placer
        self.unload_wait_s = unload_wait_s
        self._node_locks = node_locks or NodeLocks(database_url(session_factory))

    def node_lock(self, node_id: int) -> NodeLock:
        """One action at a time per node, across threads and processes: a reconcile pass and an
        operation never interleave their calls to one Triton."""
        return self._node_locks(node_id)

    # -- reading -------------------------------------------------------------------------------

    def endpoint(self, deployment_id: int) -> tuple[NodeEndpoint, str]:
        with transaction(self.session_factory) as session:
            deployment = self._get(session, deployment_id)
            node = deployment.node
            return (NodeEndpoint(node.name, node.http_url, node.grpc_url, node.api_key_ref),
                    deployment.triton_name)

    def _get(self, session: Session, deployment_id: int) -> Deployment:
        deployment = DeploymentRepository(session).get(deployment_id)
        if deployment is None:
            raise PreconditionFailed(f"deployment {deployment_id} no longer exists")
        return deployment

    # -- acting --------------------------------------------------------------------------------

    def load(self, deployment_id: int, number: int, actor: str) -> None:
        """Load version ``number`` (beside whatever serves now: Triton swaps when it is ready)
        and record the outcome; raises DeploymentFailed or NodeUnavailable when it did not work."""
        with transaction(self.session_factory) as session:
            deployment = self._get(session, deployment_id)
            version = VersionRepository(session).get(deployment.model_id, number)
            if version is None:
                raise PreconditionFailed(f"model '{deployment.model.name}' has no version {number}")
            spec = VersionSpec.of(version)
            # Already LOADING: a load that a stopped process left unfinished; this one resumes it
            # (nothing else works on the deployment: operations on it are excluded by the caller).
            if deployment.state != DeploymentState.LOADING:
                self._transition(session, deployment, DeploymentState.LOADING, actor)
            node = deployment.node
            endpoint = NodeEndpoint(node.name, node.http_url, node.grpc_url, node.api_key_ref)
            name, previous = deployment.triton_name, deployment.serving_version
        try:
            control = self.control_for(endpoint)
        except ControlPlaneError as exc:
            # Nothing reached the node (its key cannot be read, say): record why.
            self._record_failed_load(deployment_id, None, name, number, previous, exc.message,
                                     actor)
            raise
        try:
            booking = None if self.placer is None else self.placer.book(deployment_id, number)
            config_json, files = self.render(
                name, spec, None if booking is None else booking.placement,
                booking is not None and booking.simulated)
        except ControlPlaneError as exc:
            # Not placed (no GPU has room) or not renderable: nothing reached the node, and the
            # version it serves, if any, goes on serving.
            self._record_failed_load(deployment_id, control, name, number, previous,
                                     exc.message, actor)
            _close(control)
            if isinstance(exc, PlacementRefused):
                raise DeploymentFailed(f"version {number} of '{spec.model}' was not placed on "
                                       f"node '{endpoint.name}': {exc.message}") from exc
            raise
        try:
            control.load(name, config_json, files)
            if not control.is_model_ready(name):
                raise LoadRejected(endpoint.grpc_url, name, "the load returned but the model is "
                                   "not ready")
        except NodeUnreachable as exc:
            self._record_unreachable(deployment_id, endpoint, str(exc), actor)
            raise NodeUnavailable(f"node '{endpoint.name}' did not answer during the load of "
                                  f"version {number} as '{name}': {exc}") from exc
        except TritonControlError as exc:
            self._record_failed_load(deployment_id, control, name, number, previous, str(exc),
                                     actor)
            raise DeploymentFailed(f"version {number} of '{spec.model}' did not load as '{name}' "
                                   f"on node '{endpoint.name}': {exc}") from exc
        finally:
            _close(control)
        with transaction(self.session_factory) as session:
            deployment = self._get(session, deployment_id)
            self._transition(session, deployment, DeploymentState.READY, actor,
                             serving_version=number, error=None)
            DeploymentRepository(session).record_node_health(deployment.node_id, NodeHealth.UP,
                                                             "")
        if self.placer is not None:
            self.placer.activate(deployment_id, number, None if booking is None
                                 else booking.before)

    def unload(self, deployment_id: int, actor: str) -> None:
        """Unload the deployment's Triton model; Triton lets in-flight requests finish and our
        backend drains open streams before the engine stops."""
        with transaction(self.session_factory) as session:
            deployment = self._get(session, deployment_id)
            if deployment.state != DeploymentState.DRAINING:
                self._transition(session, deployment, DeploymentState.DRAINING, actor)
        endpoint, name = self.endpoint(deployment_id)
        control = self.control_for(endpoint)
        try:
            control.unload(name)
            # Until Triton stops listing it as ready. Its engine stops seconds later still:
            # Triton's API does not show that for a model loaded from config and files.
            deadline = time.monotonic() + self.unload_wait_s
            while name in ready_versions(control):
                if time.monotonic() > deadline:
                    raise DeploymentFailed(f"'{name}' on node '{endpoint.name}' was still "
                                           f"loaded {self.unload_wait_s:g} s after its unload")
                time.sleep(0.2)
        except NodeUnreachable as exc:
            self._record_unreachable(deployment_id, endpoint, str(exc), actor)
            raise NodeUnavailable(f"node '{endpoint.name}' did not answer during the unload of "
                                  f"'{name}': {exc}") from exc
        except TritonControlError as exc:
            # Stays DRAINING: the reconciler unloads it again on its next pass.
            raise DeploymentFailed(f"unloading '{name}' on node '{endpoint.name}' failed: {exc}"
                                   ) from exc
        finally:
            _close(control)
        self.mark_unloaded(deployment_id, actor)

    def mark_ready(self, deployment_id: int, number: int, actor: str) -> None:
        with transaction(self.session_factory) as session:
            deployment = self._get(session, deployment_id)
            if deployment.state == DeploymentState.READY:
                DeploymentRepository(session).set_fields(deployment, serving_version=number,
                                                         error=None)
                return
            if deployment.state != DeploymentState.LOADING:
                # Seen ready without a load of ours (the node came back, or another replica
                # loaded it): the intermediate LOADING keeps the transition rules whole.
                self._transition(session, deployment, DeploymentState.LOADING, actor)
            self._transition(session, deployment, DeploymentState.READY, actor,
                             serving_version=number, error=None)
        if self.placer is not None:
            self.placer.activate(deployment_id, number, None)

    def mark_unloaded(self, deployment_id: int, actor: str) -> None:
        with transaction(self.session_factory) as session:
            deployment = self._get(session, deployment_id)
            if deployment.state not in (DeploymentState.DRAINING, DeploymentState.UNKNOWN):
                self._transition(session, deployment, DeploymentState.DRAINING, actor)
            self._transition(session, deployment, DeploymentState.UNLOADED, actor,
                             serving_version=None)
        if self.placer is not None:
            # Unloaded: the engine's memory is no longer ours to keep.
            self.placer.release(deployment_id)

    # -- recording -----------------------------------------------------------------------------

    def _transition(self, session: Session, deployment: Deployment, target: DeploymentState,
                    actor: str, **fields: Any) -> None:
        current = DeploymentState(deployment.state)
        if current not in sources_of(target):
            raise PreconditionFailed(f"deployment '{deployment.triton_name}' on node "
                                     f"'{deployment.node.name}' is {current}; it cannot become "
                                     f"{target}")
        if not DeploymentRepository(session).transition(deployment, current, target, actor,
                                                        **fields):
            raise PreconditionFailed(f"deployment '{deployment.triton_name}' changed while "
                                     f"becoming {target}; it is handled elsewhere")

    def _record_unreachable(self, deployment_id: int, endpoint: NodeEndpoint, detail: str,
                            actor: str) -> None:
        with transaction(self.session_factory) as session:
            repository = DeploymentRepository(session)
            deployment = self._get(session, deployment_id)
            repository.record_node_health(deployment.node_id, NodeHealth.DOWN, detail)
            repository.mark_node_unknown(deployment.node_id, f"node '{endpoint.name}' did not "
                                         f"answer: {detail}", actor)

    def _record_failed_load(self, deployment_id: int, control: TritonControl | None, name: str,
                            number: int, previous: int | None, detail: str, actor: str) -> None:
        # After a failed reload Triton keeps serving the version it had, so a failed swap leaves
        # the deployment READY on the old version, with the reason on record.
        try:
            still_ready = control is not None and previous is not None and \
                previous in ready_versions(control).get(name, set())
        except TritonControlError:
            still_ready = False
        error = f"loading version {number} failed: {detail}"
        with transaction(self.session_factory) as session:
            deployment = self._get(session, deployment_id)
            if still_ready:
                self._transition(session, deployment, DeploymentState.READY, actor,
                                 serving_version=previous, error=error)
            else:
                self._transition(session, deployment, DeploymentState.FAILED, actor,
                                 serving_version=None, error=error)
        if self.placer is not None:
            # A version that did not load keeps nothing booked; one that still serves keeps its
            # own booking.
            if not still_ready:
                self.placer.release(deployment_id)
            elif number != previous:
                self.placer.release(deployment_id, only_version=number)


def ready_versions(control: TritonControl) -> Mapping[str, set[int]]:
    """Each Triton model name the node serves, with its ready versions."""
    ready: dict[str, set[int]] = {}
    for entry in control.index():
        if entry.state == "READY" and entry.version is not None:
            ready.setdefault(entry.name, set()).add(entry.version)
    return ready


def _close(control: TritonControl) -> None:
    close = getattr(control, "close", None)
    if close is not None:
        close()

