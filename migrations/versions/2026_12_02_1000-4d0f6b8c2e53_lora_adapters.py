"""lora adapters: adapters registered under versions, and the adapters wanted on deployments

Revision ID: 4d0f6b8c2e53
Revises: 3c9e5a7b1d42
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "4d0f6b8c2e53"
down_revision: str | None = "3c9e5a7b1d42"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "adapters",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("source", sa.String(length=1024), nullable=False),
        sa.Column("checksum", sa.String(length=64), nullable=True),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("target_modules", sa.JSON(), nullable=False),
        sa.Column("base_model", sa.String(length=1024), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["version_id"], ["model_versions.id"],
                                name=op.f("fk_adapters_version_id_model_versions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_adapters")),
        sa.UniqueConstraint("version_id", "name", name=op.f("uq_adapters_version_id_name")),
    )
    op.create_table(
        "deployment_adapters",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("deployment_id", sa.Integer(), nullable=False),
        sa.Column("adapter_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("updated_by", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["adapter_id"], ["adapters.id"],
                                name=op.f("fk_deployment_adapters_adapter_id_adapters"),
                                ondelete="RESTRICT"),
        sa.ForeignKeyConstraint(["deployment_id"], ["deployments.id"],
                                name=op.f("fk_deployment_adapters_deployment_id_deployments"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployment_adapters")),
        sa.UniqueConstraint("deployment_id", "adapter_id",
                            name=op.f("uq_deployment_adapters_deployment_id_adapter_id")),
    )
    op.create_index(op.f("ix_deployment_adapters_adapter_id"), "deployment_adapters",
                    ["adapter_id"])
    op.create_index(op.f("ix_deployment_adapters_deployment_id"), "deployment_adapters",
                    ["deployment_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_deployment_adapters_deployment_id"), table_name="deployment_adapters")
    op.drop_index(op.f("ix_deployment_adapters_adapter_id"), table_name="deployment_adapters")
    op.drop_table("deployment_adapters")
    op.drop_table("adapters")
