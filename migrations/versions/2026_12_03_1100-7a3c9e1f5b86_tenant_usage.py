"""tenant usage: counts per tenant, model and UTC hour as the gateways report them, and the
reports already counted

Revision ID: 7a3c9e1f5b86
Revises: 6f2b8d0e4a75
Create Date: 2026-12-03 11:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "7a3c9e1f5b86"
down_revision: str | None = "6f2b8d0e4a75"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tenant_usage",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=64), nullable=False),
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("refusals", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tenant_usage")),
        sa.UniqueConstraint("tenant", "model", "hour",
                            name=op.f("uq_tenant_usage_tenant_model_hour")),
    )
    op.create_table(
        "usage_reports",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("gateway", sa.String(length=128), nullable=False),
        sa.Column("entries", sa.Integer(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_reports")),
    )
    op.create_index(op.f("ix_usage_reports_received_at"), "usage_reports", ["received_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_usage_reports_received_at"), table_name="usage_reports")
    op.drop_table("usage_reports")
    op.drop_table("tenant_usage")
