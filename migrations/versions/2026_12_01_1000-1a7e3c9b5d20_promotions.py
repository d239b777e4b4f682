"""promotions, and gates on versions

Revision ID: 1a7e3c9b5d20
Revises: f4c6a8e1b293
Create Date: 2026-12-01 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "1a7e3c9b5d20"
down_revision: str | None = "f4c6a8e1b293"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ONE_UNFINISHED = sa.text("state IN ('pending', 'running')")


def upgrade() -> None:
    with op.batch_alter_table("model_versions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("gates", sa.JSON(), nullable=False, server_default="{}"))
    with op.batch_alter_table("model_versions", schema=None) as batch_op:
        batch_op.alter_column("gates", server_default=None)
    op.create_table(
        "promotions",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("alias", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=True),
        sa.Column("from_version", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("steps", sa.JSON(), nullable=False),
        sa.Column("gate_results", sa.JSON(), nullable=False),
        sa.Column("failed_step", sa.String(length=32), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("manifest", sa.JSON(), nullable=True),
        sa.Column("nodes", sa.JSON(), nullable=False),
        sa.Column("progress", sa.JSON(), nullable=False),
        sa.Column("ci_run_url", sa.String(length=2048), nullable=True),
        sa.Column("git_sha", sa.String(length=64), nullable=True),
        sa.Column("requested_by", sa.String(length=64), nullable=False),
        sa.Column("request_id", sa.String(length=128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"],
                                name=op.f("fk_promotions_model_id_models"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_promotions")),
    )
    op.create_index(op.f("ix_promotions_model_id_created_at"), "promotions",
                    ["model_id", "created_at"])
    op.create_index(op.f("ix_promotions_state"), "promotions", ["state"])
    op.create_index("uq_promotions_one_unfinished_per_model", "promotions", ["model_id"],
                    unique=True, postgresql_where=ONE_UNFINISHED, sqlite_where=ONE_UNFINISHED)


def downgrade() -> None:
    op.drop_index("uq_promotions_one_unfinished_per_model", table_name="promotions")
    op.drop_index(op.f("ix_promotions_state"), table_name="promotions")
    op.drop_index(op.f("ix_promotions_model_id_created_at"), table_name="promotions")
    op.drop_table("promotions")
    with op.batch_alter_table("model_versions", schema=None) as batch_op:
        batch_op.drop_column("gates")
