"""The steps of a LoRA adapter's promotion onto the deployments of an alias (the alias does not
move; the adapter is the version's, the version the alias serves):

1. register the adapter under the version from its source (or find it registered);
2. load it on each of the alias's deployments, out of the routing table;
3. run its gates there through ``lora_name``, and compare it with the version's answers without
   an adapter;
4. put it into the routing table (the gateway then serves ``M:<adapter>``).

On a failure the loads the promotion made are unloaded and it ends FAILED with the step and the
reason; deployments that had the adapter before keep it. The registration stays, as a version
registered by a promotion does. Every step can run again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session

from control_plane.adapters import loading
from control_plane.adapters import service as adapters
from control_plane.adapters.orm import Adapter, AdapterState
from control_plane.adapters.repository import DeploymentAdapterRepository
from control_plane.adapters.schemas import AdapterCreate
from control_plane.deployments import service as deployments
from control_plane.deployments.orm import DeploymentState
from control_plane.errors import AdapterNotFound, ControlPlaneError
from control_plane.promotions.run import PromotionRun, StepFailed, Target
from control_plane.registry import aliases
from control_plane.registry import service as registry
from control_plane.registry.gates import Gates
from control_plane.registry.sources import check_source

if TYPE_CHECKING:
    from control_plane.promotions.driver import PromotionDriver


class AdapterRun(PromotionRun):
    def __init__(self, driver: PromotionDriver, promotion_id: str) -> None:
        super().__init__(driver, promotion_id)
        with self._tx(read_only=True) as session:
            promotion = self._get(session)
            assert promotion.adapter is not None and promotion.version is not None
            self.adapter = promotion.adapter
            self.number = promotion.version
            self.manifest = promotion.manifest

    def steps(self) -> dict[str, Callable[[], str | None]]:
        return {"register": self._register, "load_adapter": self._load,
                "gates_adapter": self._gates_adapter, "publish_adapter": self._publish}

    def gates(self) -> Gates:
        with self._tx(read_only=True) as session:
            return Gates.model_validate(self._registered(session).gates)

    def _registered(self, session: Session) -> Adapter:
        return adapters.get_adapter(session, self.model, self.number, self.adapter)

    @property
    def _label(self) -> str:
        return f"adapter '{self.adapter}' of version {self.number}"

    # -- the steps -----------------------------------------------------------------------------

    def _register(self) -> str:
        with self._tx() as session:
            model = registry.get_model(session, self.model, for_update=True)
            alias = aliases.find_alias(session, model, self.alias)
            if alias is None or alias.version.number != self.number:
                now = "is gone" if alias is None else f"serves version {alias.version.number}"
                raise StepFailed(f"'{self.alias}' served version {self.number} when the "
                                 f"promotion started and now {now}; promote the adapter again "
                                 "for the version it serves")
            if self.manifest is None:
                self._registered(session)  # raises AdapterNotFound, with where to look
                return f"{self._label} is registered"
            wanted = AdapterCreate.model_validate(self.manifest)
            try:
                existing = self._registered(session)
            except AdapterNotFound:
                adapters.register(session, self.actor, self.model, self.number, wanted,
                                  self.driver.source_roots)
                return f"{self._label} registered from {wanted.source}"
            # Registered already: by this promotion before a restart, or by someone else. Only
            # the same files may go on; other weights need a name of their own.
            checked = check_source(wanted.source, self.driver.source_roots)
            if (existing.source, existing.checksum) != (checked.uri, checked.checksum):
                raise StepFailed(
                    f"{self._label} is registered already from {existing.source} (checksum "
                    f"{existing.checksum}), and {wanted.source} holds other files (checksum "
                    f"{checked.checksum}); promote these weights under a name of their own")
            return f"{self._label} was registered from the same files"

    def _load(self) -> str:
        started: list[str] = []
        ours: list[int] = []
        kept: list[str] = []
        with self._tx() as session:
            model = registry.get_model(session, self.model, for_update=True)
            rows = DeploymentAdapterRepository(session)
            promotion = self._get(session)
            already = set(promotion.progress.get("loaded_by_promotion", []))
            for deployment in deployments.deployed(session, model.id, self.alias):
                if not deployment.wanted:
                    continue
                row = rows.find(deployment.id, self.adapter)
                if row is not None and row.state == AdapterState.LOADED and \
                        deployment.id not in already:
                    kept.append(deployment.node.name)  # there before: left as it is
                    continue
                if row is None:
                    ours.append(deployment.id)
                started.append(loading.load(session, self.actor, deployment.id, self.adapter,
                                            self.number, routed=False)[1].id)
            # Recorded with the loads, so a roll-back after a restart knows what to unload.
            promotion.progress = {**promotion.progress,
                                  "loaded_by_promotion": sorted(already | set(ours))}
        self._operations_or_fail(started, f"{self._label} did not load")
        return (f"{self._label} loaded out of the routing table on {len(started)} "
                f"deployment(s)" + (f"; already loaded on {', '.join(kept)}" if kept else ""))

    def _adapter_targets(self) -> list[Target]:
        """The alias's READY deployments whose engine holds the adapter."""
        with self._tx(read_only=True) as session:
            model = registry.get_model(session, self.model)
            rows = DeploymentAdapterRepository(session)
            found = []
            for deployment in deployments.deployed(session, model.id, self.alias):
                row = rows.find(deployment.id, self.adapter)
                if deployment.state == DeploymentState.READY and row is not None and \
                        row.state == AdapterState.LOADED:
                    found.append(Target(deployment.node.name, deployment.node.grpc_url,
                                        deployment.triton_name, self.adapter))
            return found

    def _gates_adapter(self) -> str:
        gates, targets = self.gates(), self._adapter_targets()
        if not targets:
            raise StepFailed(f"{self._label} is loaded on none of '{self.alias}''s READY "
                             "deployments")
        results = self._smoke(gates, "candidate", targets)
        if gates.compare is not None:
            with_adapter = targets[0]
            without = Target(with_adapter.node, with_adapter.grpc_url, with_adapter.triton_name)
            results.append(self._compare(gates, with_adapter, without, self.number,
                                         self.number))
        self._record_gates("candidate", results)
        return self._judge(results)

    def _publish(self) -> str:
        with self._tx() as session:
            model = registry.get_model(session, self.model, for_update=True)
            published = [d.node.name for d in deployments.deployed(session, model.id, self.alias)
                         if d.wanted and loading.publish(session, self.actor, d.id, self.adapter)]
        return (f"{self._label} routed on {', '.join(published) or 'no new node'}: the gateway "
                f"serves it as '{self.model}:{self.adapter}'")

    def roll_back(self) -> list[str]:
        """Unload what the promotion loaded that is not routed yet."""
        started: list[str] = []
        try:
            with self._tx() as session:
                model = registry.get_model(session, self.model, for_update=True)
                ours = set(self._get(session).progress.get("loaded_by_promotion", []))
                rows = DeploymentAdapterRepository(session)
                for deployment in deployments.deployed(session, model.id, self.alias):
                    row = rows.find(deployment.id, self.adapter)
                    if deployment.id in ours and row is not None and not row.routed and \
                            row.state != AdapterState.UNLOADING:
                        started.append(loading.unload(session, self.actor, deployment.id,
                                                      self.adapter)[1].id)
            self._operations_or_fail(started, f"{self._label} was not unloaded")
        except (StepFailed, ControlPlaneError) as exc:
            return [f"unloading the adapter failed: {exc.message}"]
        return [f"{self._label} unloaded from {len(started)} deployment(s)"] if started else []
