"""model aliases and their move history

Revision ID: 8a3d6e2f4c17
Revises: 5c1f0a7d9b2e
Create Date: 2026-11-30 00:05:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "8a3d6e2f4c17"
down_revision: str | None = "5c1f0a7d9b2e"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "model_aliases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("updated_by", sa.String(length=64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"],
                                name=op.f("fk_model_aliases_model_id_models"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["version_id"], ["model_versions.id"],
                                name=op.f("fk_model_aliases_version_id_model_versions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_aliases")),
        sa.UniqueConstraint("model_id", "name", name=op.f("uq_model_aliases_model_id_name")),
    )
    op.create_table(
        "alias_moves",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("alias_id", sa.Integer(), nullable=False),
        sa.Column("from_number", sa.Integer(), nullable=True),
        sa.Column("to_number", sa.Integer(), nullable=False),
        sa.Column("moved_by", sa.String(length=64), nullable=False),
        sa.Column("moved_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["alias_id"], ["model_aliases.id"],
                                name=op.f("fk_alias_moves_alias_id_model_aliases"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alias_moves")),
    )
    op.create_index(op.f("ix_alias_moves_alias_id"), "alias_moves", ["alias_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_alias_moves_alias_id"), table_name="alias_moves")
    op.drop_table("alias_moves")
    op.drop_table("model_aliases")
