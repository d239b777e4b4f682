"""tenant limits: requests and tokens per minute, concurrency and a daily token budget, per
tenant and per model; tenants get an ETag

Revision ID: 6f2b8d0e4a75
Revises: 5e1a7c9d3f64
Create Date: 2026-12-03 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "6f2b8d0e4a75"
down_revision: str | None = "5e1a7c9d3f64"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing tenants: unlimited, as before.
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("limits", sa.JSON(), nullable=False,
                                   server_default=sa.text("'{}'")))
        batch.add_column(sa.Column("model_limits", sa.JSON(), nullable=False,
                                   server_default=sa.text("'{}'")))
        batch.add_column(sa.Column("revision", sa.Integer(), nullable=False,
                                   server_default=sa.text("1")))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("revision")
        batch.drop_column("model_limits")
        batch.drop_column("limits")
