"""All SQL of Triton nodes. Flush only; the caller's transaction commits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from control_plane.errors import PreconditionFailed
from control_plane.nodes.orm import TritonNode


class NodeRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get_by_name(self, name: str, *, for_update: bool = False) -> TritonNode | None:
        statement = select(TritonNode).where(TritonNode.name == name)
        if for_update:
            statement = statement.with_for_update()
        return self.session.scalars(statement).one_or_none()

    def all(self) -> Sequence[TritonNode]:
        return self.session.scalars(select(TritonNode).order_by(TritonNode.name)).all()

    def in_service(self) -> Sequence[TritonNode]:
        """Nodes not cordoned: where new engines may go."""
        return self.session.scalars(select(TritonNode).where(TritonNode.cordoned_at.is_(None))
                                    .order_by(TritonNode.name)).all()

    def list(self, labels: Mapping[str, str], limit: int, offset: int
             ) -> tuple[Sequence[TritonNode], int]:
        conditions = [TritonNode.labels[key].as_string() == value for key, value in labels.items()]
        total = self.session.scalar(select(func.count()).select_from(TritonNode).where(*conditions))
        page = self.session.scalars(select(TritonNode).where(*conditions)
                                    .order_by(TritonNode.name).limit(limit).offset(offset)).all()
        return page, total or 0

    def save(self, node: TritonNode) -> None:
        self.session.add(node)
        self._flush(node)

    def delete(self, node: TritonNode) -> None:
        self.session.delete(node)
        self._flush(node)

    def _flush(self, node: TritonNode) -> None:
        try:
            self.session.flush()
        except StaleDataError as exc:
            raise PreconditionFailed(f"node '{node.name}' was changed by another request "
                                     "meanwhile; GET it again and retry") from exc
