"""adapter promotions: an adapter's gates, adapters loaded but not yet routed, promotions of an
adapter

Revision ID: 5e1a7c9d3f64
Revises: 4d0f6b8c2e53
Create Date: 2026-12-02 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5e1a7c9d3f64"
down_revision: str | None = "4d0f6b8c2e53"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing rows: adapters without gates, loaded adapters routed as before.
    with op.batch_alter_table("adapters") as batch:
        batch.add_column(sa.Column("gates", sa.JSON(), nullable=False,
                                   server_default=sa.text("'{}'")))
    with op.batch_alter_table("deployment_adapters") as batch:
        batch.add_column(sa.Column("routed", sa.Boolean(), nullable=False,
                                   server_default=sa.true()))
    with op.batch_alter_table("promotions") as batch:
        batch.add_column(sa.Column("adapter", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("promotions") as batch:
        batch.drop_column("adapter")
    with op.batch_alter_table("deployment_adapters") as batch:
        batch.drop_column("routed")
    with op.batch_alter_table("adapters") as batch:
        batch.drop_column("gates")
