"""tenant weight: a tenant's fair share of a priority level in the backend's queue

Revision ID: 8b4d0f2a6c97
Revises: 7a3c9e1f5b86
Create Date: 2026-12-03 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "8b4d0f2a6c97"
down_revision: str | None = "7a3c9e1f5b86"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("weight", sa.Float(), nullable=False,
                                   server_default=sa.text("1.0")))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("weight")
