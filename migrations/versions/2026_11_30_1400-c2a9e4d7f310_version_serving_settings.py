"""version serving settings and Triton config overrides

Revision ID: c2a9e4d7f310
Revises: b4e7c9a1d305
Create Date: 2026-11-30 14:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "c2a9e4d7f310"
down_revision: str | None = "b4e7c9a1d305"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Versions registered before these columns existed serve with the default settings, which an
    # empty object means; the server default only fills those rows and is dropped afterwards.
    with op.batch_alter_table("model_versions") as batch:
        batch.add_column(sa.Column("serving", sa.JSON(), nullable=False, server_default="{}"))
        batch.add_column(sa.Column("triton_config", sa.JSON(), nullable=False,
                                   server_default="{}"))
    with op.batch_alter_table("model_versions") as batch:
        batch.alter_column("serving", server_default=None)
        batch.alter_column("triton_config", server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("model_versions") as batch:
        batch.drop_column("triton_config")
        batch.drop_column("serving")
