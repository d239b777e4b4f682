"""The steps of a version's promotion:

1. register (from a manifest) and validate the version;
2. deploy it as a candidate alias (its own Triton model name) on the nodes the target runs on;
3. run its gates against the candidate, and compare it with the version it replaces;
4. move the target alias with the zero-downtime swap;
5. run the gates again on the served name;
6. remove the candidate.

On a failure the previous version keeps (or, after the swap, gets back) the alias, the candidate is
removed, and the promotion ends FAILED with the step and the reason. Every step can run again.
"""

from __future__ import annotations

from collections.abc import Callable

from control_plane.deployments import service as deployments
from control_plane.deployments.naming import triton_model_name
from control_plane.deployments.repository import DeploymentRepository
from control_plane.errors import ControlPlaneError
from control_plane.lifecycle import alias_moves
from control_plane.lifecycle.alias_moves import SwapStarted
from control_plane.promotions import gate_checks
from control_plane.promotions.manifest import VersionManifest
from control_plane.promotions.run import PromotionRun, StepFailed
from control_plane.registry import aliases, validation
from control_plane.registry import service as registry
from control_plane.registry.gates import Gates
from control_plane.registry.orm import VersionState
from control_plane.triton import config_builder


class VersionRun(PromotionRun):
    cleanup_step = "remove_candidate"

    def steps(self) -> dict[str, Callable[[], str | None]]:
        return {"register": self._register, "deploy_candidate": self._deploy_candidate,
                "gates_candidate": self._gates_candidate, "swap": self._swap,
                "gates_served": self._gates_served, "remove_candidate": self._remove_candidate}

    def roll_back(self) -> list[str]:
        """The previous version back where the promotion moved the alias; the candidate
        removed."""
        notes = []
        try:
            restored = self._restore_alias()
            if restored:
                notes.append(restored)
        except (StepFailed, ControlPlaneError) as exc:
            notes.append(f"putting the previous version back failed: {exc.message}")
        try:
            self._remove_candidate()
        except (StepFailed, ControlPlaneError) as exc:
            notes.append(f"the candidate was not removed: {exc.message}")
        return notes

    # -- the steps -----------------------------------------------------------------------------

    def _register(self) -> str:
        validate = None
        with self._tx() as session:
            promotion = self._get(session)
            manifest = None if promotion.version is not None else \
                VersionManifest.model_validate(promotion.manifest)
        # The source is read and hashed with no transaction open.
        create = None if manifest is None else manifest.version_create()
        inspected = None if create is None else registry.inspect_version(
            self.model, create, self.driver.source_roots, config_builder.check)
        with self._tx() as session:
            promotion = self._get(session)
            if promotion.version is None and create is not None:
                promotion.version = registry.register_version(
                    session, self.actor, self.model, create, self.driver.source_roots,
                    config_builder.check, inspected=inspected).number
            # Without a version a promotion carries a manifest, registered just above.
            assert promotion.version is not None, "a promotion names a version or a manifest"
            version = registry.get_version(session, self.model, promotion.version)
            number = version.number
            if version.state == VersionState.ARCHIVED:
                raise StepFailed(f"version {number} is archived")
            if version.state == VersionState.REGISTERED:
                validate = validation.start(session, self.actor, self.model, number).id
        if validate is not None:
            self._operations_or_fail([validate], f"version {number} did not pass validation")
            return f"version {number} registered and validated"
        return f"version {number} is validated"

    def _candidate_alias(self) -> str:
        return f"candidate-{self.id[:12]}"

    def _deploy_candidate(self) -> str:
        number, candidate = self._version(), self._candidate_alias()
        with self._tx() as session:
            model = registry.get_model(session, self.model, for_update=True)
            if aliases.find_alias(session, model, candidate) is None:
                alias_moves.move_alias(session, self.actor, self.model, candidate, number)
            started = [deployments.apply(session, self.actor, self.model, candidate, node)[1].id
                       for node in self.nodes]
            promotion = self._get(session)
            promotion.progress = {**promotion.progress, "candidate": candidate}
        self._operations_or_fail(started, f"version {number} did not deploy as a candidate")
        return (f"version {number} serves as '{triton_model_name(self.model, candidate)}' on "
                f"{', '.join(self.nodes)}")

    def gates(self) -> Gates:
        number = self._version()
        with self._tx(read_only=True) as session:
            return Gates.model_validate(registry.get_version(session, self.model, number).gates)

    def _gates_candidate(self) -> str:
        gates, number = self.gates(), self._version()
        candidates = self._targets(self._candidate_alias())
        if len(candidates) < len(self.nodes):
            raise StepFailed("the candidate is not ready on every node")
        results = self._smoke(gates, "candidate", candidates)
        if gates.compare is not None:
            served = {t.node: t for t in self._targets(self.alias)}
            pair = next(((c, served[c.node]) for c in candidates if c.node in served), None)
            if self.from_version is None or pair is None:
                results.append(gate_checks.skipped_comparison(
                    gates.compare, "skipped: no version serves the alias yet"))
            else:
                assert self.from_version is not None
                results.append(self._compare(gates, pair[0], pair[1], self.from_version,
                                             number))
        self._record_gates("candidate", results)
        return self._judge(results)

    def _swap(self) -> str:
        number = self._version()
        started: list[str] = []
        with self._tx() as session:
            model = registry.get_model(session, self.model, for_update=True)
            alias = aliases.find_alias(session, model, self.alias)
            if alias is not None and alias.version.number == number:
                if not self._get(session).progress.get("fresh_deployment"):
                    return f"'{self.alias}' already pointed at version {number}"
            else:
                outcome = alias_moves.move_alias(session, self.actor, self.model, self.alias,
                                                 number)
                if isinstance(outcome, SwapStarted):
                    started = [outcome.operation.id]
            if not started:
                # The alias ran nowhere: it now points at the version; serve it on the nodes.
                promotion = self._get(session)
                promotion.progress = {**promotion.progress, "fresh_deployment": True}
                started = [deployments.apply(session, self.actor, self.model, self.alias,
                                             node)[1].id for node in self.nodes]
        self._operations_or_fail(started, f"'{self.alias}' was not moved to version {number}")
        return f"'{self.alias}' serves version {number}"

    def _gates_served(self) -> str:
        served = self._targets(self.alias)
        results = self._smoke(self.gates(), "served", served)
        self._record_gates("served", results)
        return self._judge(results)

    def _remove_candidate(self) -> str:
        candidate = self._candidate_alias()
        with self._tx() as session:
            model = registry.get_model(session, self.model, for_update=True)
            if aliases.find_alias(session, model, candidate) is None:
                return "no candidate to remove"
            started = [deployments.remove(session, self.actor, self.model, candidate,
                                          d.node.name)[1].id
                       for d in DeploymentRepository(session).of_alias(model.id, candidate)]
        self._operations_or_fail(started, "the candidate did not unload")
        with self._tx() as session:
            alias_moves.delete_alias(session, self.actor, self.model, candidate)
        return f"'{triton_model_name(self.model, candidate)}' unloaded and its alias deleted"

    def _restore_alias(self) -> str | None:
        """The alias back on the version it had before, if the promotion moved it."""
        number = self._version_or_none()
        with self._tx() as session:
            model = registry.get_model(session, self.model, for_update=True)
            alias = aliases.find_alias(session, model, self.alias)
            promotion = self._get(session)
            fresh = bool(promotion.progress.get("fresh_deployment"))
            if alias is None or number is None or alias.version.number != number or \
                    self.from_version == number:
                return None
            removals: list[str] = []
            swap: list[str] = []
            if fresh:
                # It ran nowhere before the promotion: take down what the promotion started.
                removals = [deployments.remove(session, self.actor, self.model, self.alias,
                                               d.node.name)[1].id
                            for d in DeploymentRepository(session).of_alias(model.id,
                                                                            self.alias)]
            elif self.from_version is not None:
                outcome = alias_moves.move_alias(session, self.actor, self.model, self.alias,
                                                 self.from_version, purpose="rollback")
                if isinstance(outcome, SwapStarted):
                    swap = [outcome.operation.id]
        if removals:
            self._operations_or_fail(removals, f"'{self.alias}' was not taken down again")
            with self._tx() as session:
                if self.from_version is None:
                    alias_moves.delete_alias(session, self.actor, self.model, self.alias)
                    return f"'{self.alias}' removed again: no version served it before"
                alias_moves.move_alias(session, self.actor, self.model, self.alias,
                                       self.from_version, purpose="rollback")
            return f"'{self.alias}' back on version {self.from_version}"
        if swap:
            self._operations_or_fail(swap, f"swapping '{self.alias}' back failed")
        return f"'{self.alias}' swapped back to version {self.from_version}"
