"""gpu placement: reservations, version resources and profiles, node inventories

Revision ID: f4c6a8e1b293
Revises: e3b8d2f6a417
Create Date: 2026-11-30 17:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "f4c6a8e1b293"
down_revision: str | None = "e3b8d2f6a417"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table("gpu_reservations",
    sa.Column("id", sa.Integer(), nullable=False),
    sa.Column("deployment_id", sa.Integer(), nullable=False),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("node_id", sa.Integer(), nullable=False),
    sa.Column("gpu_uuid", sa.String(length=96), nullable=False),
    sa.Column("gpu_index", sa.Integer(), nullable=False),
    sa.Column("bytes", sa.BigInteger(), nullable=False),
    sa.Column("gpu_memory_utilization", sa.Float(), nullable=False),
    sa.Column("active", sa.Boolean(), nullable=False),
    sa.Column("measured_bytes", sa.BigInteger(), nullable=True),
    sa.Column("drift_bytes", sa.BigInteger(), nullable=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(["deployment_id"], ["deployments.id"], name=op.f("fk_gpu_reservations_deployment_id_deployments"), ondelete="CASCADE"),
    sa.ForeignKeyConstraint(["node_id"], ["triton_nodes.id"], name=op.f("fk_gpu_reservations_node_id_triton_nodes"), ondelete="CASCADE"),
    sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_reservations")),
    sa.UniqueConstraint("deployment_id", "version", "gpu_uuid", name=op.f("uq_gpu_reservations_deployment_id_version_gpu_uuid"))
    )
    with op.batch_alter_table("gpu_reservations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_gpu_reservations_deployment_id"), ["deployment_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_gpu_reservations_node_id"), ["node_id"], unique=False)
    # Existing versions and nodes get the defaults: placed automatically, no GPU inventory.
    with op.batch_alter_table("model_versions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("resources", sa.JSON(), nullable=False, server_default="{}"))
        batch_op.add_column(sa.Column("model_profile", sa.JSON(), nullable=True))
    with op.batch_alter_table("model_versions", schema=None) as batch_op:
        batch_op.alter_column("resources", server_default=None)
    with op.batch_alter_table("triton_nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("gpu_inventory", sa.String(length=600), nullable=True))
        batch_op.add_column(sa.Column("excluded_gpus", sa.JSON(), nullable=False, server_default="[]"))
    with op.batch_alter_table("triton_nodes", schema=None) as batch_op:
        batch_op.alter_column("excluded_gpus", server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("triton_nodes", schema=None) as batch_op:
        batch_op.drop_column("excluded_gpus")
        batch_op.drop_column("gpu_inventory")
    with op.batch_alter_table("model_versions", schema=None) as batch_op:
        batch_op.drop_column("model_profile")
        batch_op.drop_column("resources")
    with op.batch_alter_table("gpu_reservations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gpu_reservations_node_id"))
        batch_op.drop_index(batch_op.f("ix_gpu_reservations_deployment_id"))
    op.drop_table("gpu_reservations")
