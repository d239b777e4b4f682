"""scaling policies (one per deployed alias) and the autoscaler's decisions

Revision ID: 9c5e1a3b7d08
Revises: 8b4d0f2a6c97
Create Date: 2026-12-03 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "9c5e1a3b7d08"
down_revision: str | None = "8b4d0f2a6c97"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "scaling_policies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("alias", sa.String(length=64), nullable=False),
        sa.Column("min_engines", sa.Integer(), nullable=False),
        sa.Column("max_engines", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(length=32), nullable=False),
        sa.Column("target", sa.Float(), nullable=False),
        sa.Column("scale_up_window_s", sa.Float(), nullable=False),
        sa.Column("scale_down_window_s", sa.Float(), nullable=False),
        sa.Column("cooldown_s", sa.Float(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("last_change_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(length=64), nullable=False),
        sa.Column("revision", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"],
                                name=op.f("fk_scaling_policies_model_id_models"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_scaling_policies")),
        sa.UniqueConstraint("model_id", "alias", name=op.f("uq_scaling_policies_model_id_alias")),
    )
    op.create_table(
        "scaling_decisions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("policy_id", sa.Integer(), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("engines", sa.Integer(), nullable=False),
        sa.Column("desired", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("operation_id", sa.String(length=32), nullable=True),
        sa.Column("node", sa.String(length=64), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["policy_id"], ["scaling_policies.id"],
                                name=op.f("fk_scaling_decisions_policy_id_scaling_policies"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_scaling_decisions")),
    )
    op.create_index(op.f("ix_scaling_decisions_policy_id_decided_at"), "scaling_decisions",
                    ["policy_id", "decided_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_scaling_decisions_policy_id_decided_at"),
                  table_name="scaling_decisions")
    op.drop_table("scaling_decisions")
    op.drop_table("scaling_policies")
