"""All SQL of GPU evacuations. Flush only; the caller's transaction commits."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from control_plane.deployments.orm import Deployment
from control_plane.evacuation.orm import GpuEvacuation
from control_plane.reservations.orm import GpuReservation


class EvacuationRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def booked_gpus(self) -> dict[int, tuple[Deployment, list[str]]]:
        """Every wanted deployment that serves a version, with the GPUs that version booked."""
        rows = self.session.execute(
            select(Deployment, GpuReservation.gpu_uuid)
            .join(GpuReservation, GpuReservation.deployment_id == Deployment.id)
            .options(joinedload(Deployment.node), joinedload(Deployment.model))
            .where(Deployment.wanted.is_(True),
                   GpuReservation.version == Deployment.serving_version)
            .order_by(Deployment.id, GpuReservation.gpu_index)).all()
        engines: dict[int, tuple[Deployment, list[str]]] = {}
        for deployment, uuid in rows:
            engines.setdefault(deployment.id, (deployment, []))[1].append(uuid)
        return engines

    def all(self) -> Sequence[GpuEvacuation]:
        return self.session.scalars(
            select(GpuEvacuation).options(joinedload(GpuEvacuation.replacement)
                                          .joinedload(Deployment.node))
            .order_by(GpuEvacuation.id)).all()

    def of_deployment(self, deployment_id: int) -> GpuEvacuation | None:
        return self.session.scalars(select(GpuEvacuation).where(
            GpuEvacuation.deployment_id == deployment_id)).one_or_none()

    def add(self, row: GpuEvacuation) -> None:
        self.session.add(row)
        self.session.flush()

    def delete(self, row: GpuEvacuation) -> None:
        self.session.delete(row)
        self.session.flush()
