"""The complete schema: importing this module registers every table on ``Base.metadata``.

Alembic's autogenerate and the migration tests compare against it, so a feature's ``orm`` module
that is missing here would look like a table to drop.
"""

from __future__ import annotations

from control_plane.adapters import orm as adapters_orm
from control_plane.auth import orm as auth_orm
from control_plane.autoscaling import orm as autoscaling_orm
from control_plane.db import Base
from control_plane.deployments import orm as deployments_orm
from control_plane.evacuation import orm as evacuation_orm
from control_plane.idempotency import orm as idempotency_orm
from control_plane.nodes import orm as nodes_orm
from control_plane.operations import orm as operations_orm
from control_plane.promotions import orm as promotions_orm
from control_plane.registry import orm as registry_orm
from control_plane.reservations import orm as reservations_orm
from control_plane.tenants import orm as tenants_orm
from control_plane.usage import orm as usage_orm
from control_plane.webhooks import orm as webhooks_orm

target_metadata = Base.metadata

__all__ = ["adapters_orm", "auth_orm", "autoscaling_orm", "deployments_orm", "evacuation_orm", "idempotency_orm", "nodes_orm", "operations_orm", "promotions_orm", "registry_orm", "reservations_orm", "target_metadata", "tenants_orm", "usage_orm", "webhooks_orm"]
