"""All SQL of GPU reservations. Flush only; the caller's transaction commits."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import CursorResult, delete, func, select, update
from sqlalchemy.orm import Session

from control_plane.deployments.orm import Deployment
from control_plane.nodes.orm import TritonNode
from control_plane.reservations.orm import GpuReservation


class ReservationRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def lock_node(self, node_id: int) -> None:
        """Serialise placements on one node: on PostgreSQL a row lock held to the commit (SQLite
        already runs one writing transaction at a time)."""
        self.session.execute(select(TritonNode.id).where(TritonNode.id == node_id)
                             .with_for_update())

    def on_nodes(self, node_ids: Iterable[int]) -> Sequence[GpuReservation]:
        return self.session.scalars(
            select(GpuReservation).where(GpuReservation.node_id.in_(list(node_ids)))
            .order_by(GpuReservation.id)).all()

    def booked_by_gpu(self) -> dict[tuple[str, str], int]:
        """Bytes booked per (node name, GPU uuid), over every node."""
        rows = self.session.execute(
            select(TritonNode.name, GpuReservation.gpu_uuid, func.sum(GpuReservation.bytes))
            .join(TritonNode, TritonNode.id == GpuReservation.node_id)
            .group_by(TritonNode.name, GpuReservation.gpu_uuid)).all()
        return {(node, uuid): int(total or 0) for node, uuid, total in rows}

    def of_deployment(self, deployment_id: int, version: int | None = None
                      ) -> Sequence[GpuReservation]:
        statement = select(GpuReservation).where(GpuReservation.deployment_id == deployment_id)
        if version is not None:
            statement = statement.where(GpuReservation.version == version)
        return self.session.scalars(statement.order_by(GpuReservation.gpu_index)).all()

    def add_all(self, reservations: Sequence[GpuReservation]) -> None:
        self.session.add_all(reservations)
        self.session.flush()

    def activate(self, deployment_id: int, version: int) -> None:
        self.session.execute(update(GpuReservation).where(
            GpuReservation.deployment_id == deployment_id, GpuReservation.version == version)
            .values(active=True))

    def release(self, deployment_id: int, *, keep_version: int | None = None,
                only_version: int | None = None) -> int:
        """Delete the deployment's reservations (all, all but ``keep_version``'s, or only
        ``only_version``'s); returns how many went."""
        statement = delete(GpuReservation).where(GpuReservation.deployment_id == deployment_id)
        if keep_version is not None:
            statement = statement.where(GpuReservation.version != keep_version)
        if only_version is not None:
            statement = statement.where(GpuReservation.version == only_version)
        result: CursorResult[Any] = self.session.execute(statement)  # type: ignore[assignment]
        return result.rowcount or 0

    def holders(self, node_ids: Iterable[int]) -> dict[int, Deployment]:
        """The deployments holding reservations on the nodes, by id."""
        rows = self.session.scalars(select(Deployment).where(Deployment.id.in_(
            select(GpuReservation.deployment_id).where(
                GpuReservation.node_id.in_(list(node_ids)))))).all()
        return {deployment.id: deployment for deployment in rows}
