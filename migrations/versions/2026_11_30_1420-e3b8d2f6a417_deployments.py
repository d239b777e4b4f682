"""deployments

Revision ID: e3b8d2f6a417
Revises: d7f1a3c5e902
Create Date: 2026-11-30 14:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e3b8d2f6a417"
down_revision: str | None = "d7f1a3c5e902"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table("deployments",
    sa.Column("id", sa.Integer(), nullable=False),
    sa.Column("model_id", sa.Integer(), nullable=False),
    sa.Column("alias", sa.String(length=64), nullable=False),
    sa.Column("node_id", sa.Integer(), nullable=False),
    sa.Column("triton_name", sa.String(length=160), nullable=False),
    sa.Column("wanted", sa.Boolean(), nullable=False),
    sa.Column("state", sa.String(length=16), nullable=False),
    sa.Column("serving_version", sa.Integer(), nullable=True),
    sa.Column("error", sa.Text(), nullable=True),
    sa.Column("updated_by", sa.String(length=64), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(["model_id"], ["models.id"], name=op.f("fk_deployments_model_id_models"), ondelete="RESTRICT"),
    sa.ForeignKeyConstraint(["node_id"], ["triton_nodes.id"], name=op.f("fk_deployments_node_id_triton_nodes"), ondelete="RESTRICT"),
    sa.PrimaryKeyConstraint("id", name=op.f("pk_deployments")),
    sa.UniqueConstraint("model_id", "alias", "node_id", name=op.f("uq_deployments_model_id_alias_node_id")),
    sa.UniqueConstraint("node_id", "triton_name", name=op.f("uq_deployments_node_id_triton_name"))
    )
    op.create_table("node_status",
    sa.Column("node_id", sa.Integer(), nullable=False),
    sa.Column("health", sa.String(length=8), nullable=False),
    sa.Column("detail", sa.Text(), nullable=False),
    sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("last_pass", sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(["node_id"], ["triton_nodes.id"], name=op.f("fk_node_status_node_id_triton_nodes"), ondelete="CASCADE"),
    sa.PrimaryKeyConstraint("node_id", name=op.f("pk_node_status"))
    )


def downgrade() -> None:
    op.drop_table("node_status")
    op.drop_table("deployments")
