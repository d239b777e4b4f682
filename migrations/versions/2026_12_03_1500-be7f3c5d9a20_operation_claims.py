"""Operations claimed by one process at a time: who runs one and its heartbeat, and the locks
that let one unfinished operation at a time work on a resource

Revision ID: be7f3c5d9a20
Revises: ad6f2b4c8e19
Create Date: 2026-12-03 15:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "be7f3c5d9a20"
down_revision: str | None = "ad6f2b4c8e19"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Operations unfinished at the upgrade were left by a process of the previous release, which
    # had to stop for it: they have no heartbeat and are failed as interrupted once the lease
    # from their start has passed; they hold no lock meanwhile.
    with op.batch_alter_table("operations") as batch:
        batch.add_column(sa.Column("claimed_by", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("attempts", sa.Integer(), server_default="0",
                                   nullable=False))
    op.create_table(
        "operation_locks",
        sa.Column("resource", sa.String(length=128), nullable=False),
        sa.Column("operation_id", sa.String(length=32), nullable=False),
        sa.ForeignKeyConstraint(["operation_id"], ["operations.id"],
                                name=op.f("fk_operation_locks_operation_id_operations"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("resource", name=op.f("pk_operation_locks")),
    )
    op.create_index(op.f("ix_operation_locks_operation_id"), "operation_locks",
                    ["operation_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_operation_locks_operation_id"), table_name="operation_locks")
    op.drop_table("operation_locks")
    with op.batch_alter_table("operations") as batch:
        batch.drop_column("attempts")
        batch.drop_column("heartbeat_at")
        batch.drop_column("claimed_by")
