"""Moving, rolling back and deleting aliases.

A deployed alias moves only through a swap: the new version loads beside the old on every node it
runs on, and the alias moves once all of them serve it (``lifecycle.swap_work``); an alias that runs
nowhere just moves. ``registry.aliases.record_move`` writes a move and is called from here only
(tests/control_plane/lifecycle/test_alias_moves.py proves it).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from control_plane.auth import audit
from control_plane.auth.scopes import Actor
from control_plane.deployments import service as deployments
from control_plane.errors import NothingToRollBackTo
from control_plane.operations.orm import Operation
from control_plane.registry import aliases
from control_plane.registry.orm import ModelAlias, VersionState
from control_plane.registry.repository import AliasRepository, VersionRepository
from control_plane.registry.service import get_model
from control_plane.webhooks import outbox
from control_plane.webhooks.events import EventType


@dataclass(frozen=True)
class AliasMoved:
    """The alias points at the version now (it was not deployed, or already there)."""

    alias: ModelAlias


@dataclass(frozen=True)
class SwapStarted:
    """The alias is deployed: a swap operation will move it once every node serves the version.
    The caller submits the operation to the runner after its transaction commits."""

    operation: Operation


def move_alias(session: Session, actor: Actor, model_name: str, alias_name: str, number: int,
               if_match: str | None = None, purpose: str = "move") -> AliasMoved | SwapStarted:
    """Point an alias at a version: at once if it runs nowhere, through a swap if it is deployed.
    A ``purpose`` of "rollback" publishes promotion.rolled_back when the alias has moved."""
    # Locking the model row makes concurrent moves of its aliases take turns on PostgreSQL.
    model = get_model(session, model_name, for_update=True)
    current = aliases.find_alias(session, model, alias_name)
    on_nodes = deployments.deployed(session, model.id, alias_name) if current is not None else []
    if current is None or not on_nodes or current.version.number == number:
        before = None if current is None else current.version.number
        moved = aliases.record_move(session, actor, model_name, alias_name, number, if_match)
        if purpose == "rollback" and before is not None and before != number:
            _rolled_back(session, actor, model_name, alias_name, before, number)
        return AliasMoved(moved)
    aliases.check_move(session, model_name, current, number, if_match)
    return SwapStarted(deployments.start_swap(session, actor, model_name, alias_name, number,
                                              on_nodes, purpose))


def complete_swap(session: Session, actor: Actor, model_name: str, alias_name: str,
                  number: int, rollback: bool = False) -> ModelAlias:
    """The last step of a swap: every node serves ``number``, so the alias moves to it."""
    if not rollback:
        return aliases.record_move(session, actor, model_name, alias_name, number)
    before = aliases.get_alias(session, model_name, alias_name).version.number
    alias = aliases.record_move(session, actor, model_name, alias_name, number)
    _rolled_back(session, actor, model_name, alias_name, before, number)
    return alias


def _rolled_back(session: Session, actor: Actor, model_name: str, alias_name: str,
                 from_version: int, to_version: int) -> None:
    # In the transaction of the move itself: the event is sent if and only if the move happened.
    outbox.publish(session, EventType.PROMOTION_ROLLED_BACK, {
        "model": model_name, "alias": alias_name, "from_version": from_version,
        "to_version": to_version, "by": actor.name})


def delete_alias(session: Session, actor: Actor, model_name: str, alias_name: str,
                 if_match: str | None = None) -> None:
    """Remove an alias; refused while it is deployed (its UNLOADED records go with it)."""
    deployments.check_alias_removable(session, model_name, alias_name)
    aliases.delete_alias(session, actor, model_name, alias_name, if_match)


def rollback_target(session: Session, model_name: str, alias_name: str, to: int | None) -> int:
    """The version a rollback goes to: ``to``, or the one the alias pointed at before its last
    move. Refused with the reason when there is none, or it is archived or gone."""
    alias = aliases.get_alias(session, model_name, alias_name)
    target = f"'{model_name}/{alias_name}'"
    if to is None:
        moves, _ = AliasRepository(session).history(alias.id, 1, 0)
        last = moves[0] if moves else None
        if last is None or last.from_number is None:
            raise NothingToRollBackTo(f"{target} has pointed at version {alias.version.number} "
                                      "since it was created: there is no earlier version to go "
                                      "back to; name one with 'to'")
        to = last.from_number
    if to == alias.version.number:
        raise NothingToRollBackTo(f"{target} already points at version {to}")
    version = VersionRepository(session).get(alias.model_id, to)
    if version is None:
        raise NothingToRollBackTo(f"version {to} of '{model_name}' no longer exists; name "
                                  "another with 'to'")
    if version.state == VersionState.ARCHIVED:
        raise NothingToRollBackTo(f"version {to} of '{model_name}' is archived; un-archiving is "
                                  "not possible, so name another version with 'to'")
    return to


def rollback(session: Session, actor: Actor, model_name: str, alias_name: str,
             to: int | None = None) -> tuple[int, int, AliasMoved | SwapStarted]:
    """Move the alias back (by default to the version it pointed at before its last move),
    through the swap when it is deployed. Returns (from, to, outcome)."""
    get_model(session, model_name, for_update=True)
    current = aliases.get_alias(session, model_name, alias_name).version.number
    target = rollback_target(session, model_name, alias_name, to)
    outcome = move_alias(session, actor, model_name, alias_name, target, purpose="rollback")
    audit.record(session, actor, "alias.rollback", "alias", f"{model_name}/{alias_name}",
                 before={"version": current},
                 after={"version": target, "swap": isinstance(outcome, SwapStarted)})
    return current, target, outcome
