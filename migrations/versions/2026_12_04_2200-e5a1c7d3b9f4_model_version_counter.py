"""models.last_version_number: the number given to the model's newest version

Revision ID: e5a1c7d3b9f4
Revises: d7b3e9a1c5f2
Create Date: 2026-12-04 22:00:00

Registration took the model's row lock (SELECT ... FOR UPDATE), then read MAX(number), and held
the lock through two ORM flushes and the commit; concurrent registrations of one model queued
behind it. An UPDATE of this counter takes the same lock and gives the number in one statement,
taken as the last step but one (see VersionRepository.add_next). A number is never given twice,
even after its version is deleted.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e5a1c7d3b9f4"
down_revision: str | None = "d7b3e9a1c5f2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE, not a batch: SQLite (3.35+) adds and drops a column in place, while a batch
# rebuilds the table, and dropping the old models table cascades to every version.


def upgrade() -> None:
    # The server default stays (the ORM declares it too): dropping it needs such a rebuild.
    op.add_column("models", sa.Column("last_version_number", sa.Integer(), nullable=False,
                                      server_default="0"))
    op.execute("UPDATE models SET last_version_number = COALESCE("
               "(SELECT MAX(number) FROM model_versions WHERE model_id = models.id), 0)")


def downgrade() -> None:
    op.drop_column("models", "last_version_number")
