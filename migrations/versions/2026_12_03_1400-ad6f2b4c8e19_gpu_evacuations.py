"""GPU evacuations: deployments on faulty GPUs on their way to another node

Revision ID: ad6f2b4c8e19
Revises: 9c5e1a3b7d08
Create Date: 2026-12-03 14:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "ad6f2b4c8e19"
down_revision: str | None = "9c5e1a3b7d08"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "gpu_evacuations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("deployment_id", sa.Integer(), nullable=False),
        sa.Column("replacement_id", sa.Integer(), nullable=True),
        sa.Column("faults", sa.Text(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["deployment_id"], ["deployments.id"],
                                name=op.f("fk_gpu_evacuations_deployment_id_deployments"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["replacement_id"], ["deployments.id"],
                                name=op.f("fk_gpu_evacuations_replacement_id_deployments"),
                                ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_evacuations")),
        sa.UniqueConstraint("deployment_id", name=op.f("uq_gpu_evacuations_deployment_id")),
    )


def downgrade() -> None:
    op.drop_table("gpu_evacuations")
