"""Nodes can be cordoned: taken out of routing and placement while their agent leaves

Revision ID: c4a8e2f6b1d3
Revises: be7f3c5d9a20
Create Date: 2026-12-03 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "c4a8e2f6b1d3"
down_revision: str | None = "be7f3c5d9a20"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("triton_nodes") as batch:
        batch.add_column(sa.Column("cordoned_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("triton_nodes") as batch:
        batch.drop_column("cordoned_at")
