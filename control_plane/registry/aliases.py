"""Aliases: movable names for a model's versions, each move kept in a history."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from control_plane.auth import audit
from control_plane.auth.scopes import Actor
from control_plane.concurrency import check_if_match, etag
from control_plane.db import utcnow
from control_plane.errors import AliasNotFound, InvalidAliasTarget, PreconditionFailed
from control_plane.registry.orm import AliasMove, Model, ModelAlias, VersionState
from control_plane.registry.repository import AliasRepository
from control_plane.registry.service import get_model, get_version


def alias_etag(alias: ModelAlias) -> str:
    return etag(alias.id, alias.revision)


def find_alias(session: Session, model: Model, alias_name: str) -> ModelAlias | None:
    return AliasRepository(session).get(model.id, alias_name)


def check_move(session: Session, model_name: str, alias: ModelAlias, number: int,
               if_match: str | None) -> None:
    """The checks of a move, for a move that will happen later (a swap): ETag and target."""
    check_if_match(alias_etag(alias), if_match, f"alias '{model_name}/{alias.name}'")
    version = get_version(session, model_name, number)
    if version.state == VersionState.ARCHIVED:
        raise InvalidAliasTarget(f"version {number} of '{model_name}' is archived; point "
                                 f"'{alias.name}' at a registered or validated version")


def record_move(session: Session, actor: Actor, model_name: str, alias_name: str, number: int,
                if_match: str | None = None) -> ModelAlias:
    """Point ``alias_name`` at version ``number``, creating the alias on its first move.

    Writes the move and nothing else: call ``control_plane.lifecycle.alias_moves`` instead, which
    decides whether a move may happen now or needs a swap."""
    # Locking the model row makes concurrent moves of its aliases take turns on PostgreSQL, so
    # the second one sees the first one's ETag and gets 412 instead of silently overwriting it.
    model = get_model(session, model_name, for_update=True)
    version = get_version(session, model_name, number)
    if version.state == VersionState.ARCHIVED:
        raise InvalidAliasTarget(f"version {number} of '{model_name}' is archived; point "
                                 f"'{alias_name}' at a registered or validated version")
    repository = AliasRepository(session)
    alias = repository.get(model.id, alias_name)
    target = f"{model_name}/{alias_name}"
    if alias is None:
        if if_match not in (None, "*"):
            raise PreconditionFailed(f"alias '{target}' does not exist, so no ETag can match")
        alias = ModelAlias(model_id=model.id, name=alias_name, version=version,
                           updated_by=actor.name)
        previous = None
    else:
        check_if_match(alias_etag(alias), if_match, f"alias '{target}'")
        previous = alias.version.number
        if previous == number:
            return alias
        alias.version = version
        alias.updated_by = actor.name
        alias.updated_at = utcnow()
    repository.save(alias, AliasMove(from_number=previous, to_number=number,
                                     moved_by=actor.name))
    audit.record(session, actor, "alias.move", "alias", target,
                 before=None if previous is None else {"version": previous},
                 after={"version": number})
    return alias


def get_alias(session: Session, model_name: str, alias_name: str) -> ModelAlias:
    model = get_model(session, model_name)
    alias = AliasRepository(session).get(model.id, alias_name)
    if alias is None:
        raise AliasNotFound(model_name, alias_name)
    return alias


def list_aliases(session: Session, model_name: str) -> Sequence[ModelAlias]:
    return AliasRepository(session).list(get_model(session, model_name).id)


def alias_history(session: Session, model_name: str, alias_name: str, limit: int, offset: int
                  ) -> tuple[Sequence[AliasMove], int]:
    alias = get_alias(session, model_name, alias_name)
    return AliasRepository(session).history(alias.id, limit, offset)


def delete_alias(session: Session, actor: Actor, model_name: str, alias_name: str,
                 if_match: str | None = None) -> None:
    """Remove an alias (clients stop reaching a version through it); the audit log keeps it."""
    get_model(session, model_name, for_update=True)  # takes turns with moves, as move_alias does
    alias = get_alias(session, model_name, alias_name)
    target = f"{model_name}/{alias_name}"
    check_if_match(alias_etag(alias), if_match, f"alias '{target}'")
    version = alias.version.number
    AliasRepository(session).delete(alias)
    audit.record(session, actor, "alias.delete", "alias", target, before={"version": version})
