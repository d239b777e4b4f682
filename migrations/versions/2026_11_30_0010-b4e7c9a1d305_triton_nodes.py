"""triton nodes

Revision ID: b4e7c9a1d305
Revises: 8a3d6e2f4c17
Create Date: 2026-11-30 00:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b4e7c9a1d305"
down_revision: str | None = "8a3d6e2f4c17"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "triton_nodes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("http_url", sa.String(length=512), nullable=False),
        sa.Column("grpc_url", sa.String(length=512), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("api_key_ref", sa.String(length=512), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_triton_nodes")),
        sa.UniqueConstraint("name", name=op.f("uq_triton_nodes_name")),
    )


def downgrade() -> None:
    op.drop_table("triton_nodes")
