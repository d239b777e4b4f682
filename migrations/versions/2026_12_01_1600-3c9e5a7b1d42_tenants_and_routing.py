"""tenants and routing: tenants, inference API keys, node metrics URLs and Triton versions

Revision ID: 3c9e5a7b1d42
Revises: 2b8f4d0c6e31
Create Date: 2026-12-01 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "3c9e5a7b1d42"
down_revision: str | None = "2b8f4d0c6e31"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("allowed_models", sa.JSON(), nullable=False),
        sa.Column("max_priority_level", sa.Integer(), nullable=False),
        sa.Column("default_priority_level", sa.Integer(), nullable=True),
        sa.Column("priority_over_limit", sa.String(length=16), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tenants")),
        sa.UniqueConstraint("name", name=op.f("uq_tenants_name")),
    )
    op.create_table(
        "inference_api_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=12), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"],
                                name=op.f("fk_inference_api_keys_tenant_id_tenants"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_inference_api_keys")),
        sa.UniqueConstraint("secret_hash", name=op.f("uq_inference_api_keys_secret_hash")),
        sa.UniqueConstraint("tenant_id", "name",
                            name=op.f("uq_inference_api_keys_tenant_id_name")),
    )
    with op.batch_alter_table("triton_nodes") as batch:
        batch.add_column(sa.Column("metrics_url", sa.String(length=512), nullable=True))
    with op.batch_alter_table("node_status") as batch:
        batch.add_column(sa.Column("server_version", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("node_status") as batch:
        batch.drop_column("server_version")
    with op.batch_alter_table("triton_nodes") as batch:
        batch.drop_column("metrics_url")
    op.drop_table("inference_api_keys")
    op.drop_table("tenants")
