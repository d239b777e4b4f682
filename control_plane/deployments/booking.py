"""What a load needs of GPU placement, as the actuator sees it: book GPUs before the load, make
the booking active once the engine is READY, release it when the engine goes. The placer
(``control_plane.reservations.placer``) provides it; the actuator never imports the placer, whose
bookings point at deployments."""

from __future__ import annotations

from typing import Any, Protocol

from control_plane.placement.model import Placement


class Booked(Protocol):
    @property
    def placement(self) -> Placement: ...

    @property
    def simulated(self) -> bool: ...

    # The GPU readings taken just before the booking, handed back to ``activate`` (drift check).
    @property
    def before(self) -> Any: ...


class GpuBooker(Protocol):
    def book(self, deployment_id: int, number: int) -> Booked: ...

    def activate(self, deployment_id: int, number: int, before: Any) -> None: ...

    def release(self, deployment_id: int, *, only_version: int | None = None) -> None: ...
