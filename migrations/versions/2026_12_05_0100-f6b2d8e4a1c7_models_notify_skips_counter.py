"""models notifies llmcp_changes unless an UPDATE changed only last_version_number

Revision ID: f6b2d8e4a1c7
Revises: e5a1c7d3b9f4
Create Date: 2026-12-05 01:00:00

Each registration moves its model's version counter (migration e5a1c7d3b9f4) in the statement
that inserts the version. The statement trigger on models then sent a second notification per
registration, waking every API process of every replica to empty the registry part of its read
cache, which the notification for model_versions empties anyway: the counter is in no answer.
Inserts, deletes and truncates still notify per statement; an UPDATE notifies per row only if
something beside the counter changed (compared as JSON less that key, so a column added later
notifies without touching this trigger). PostgreSQL folds a transaction's identical
notifications into one, so a statement updating many models still sends one.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "f6b2d8e4a1c7"
down_revision: str | None = "e5a1c7d3b9f4"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# What d7b3e9a1c5f2 created on models, restored by the downgrade.
STATEMENT_TRIGGER = ("CREATE TRIGGER llmcp_notify_change AFTER {events} ON models "
                     "FOR EACH STATEMENT EXECUTE FUNCTION llmcp_notify_change()")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER llmcp_notify_change ON models")
    op.execute(STATEMENT_TRIGGER.format(events="INSERT OR DELETE OR TRUNCATE"))
    op.execute("""
        CREATE TRIGGER llmcp_notify_change_update AFTER UPDATE ON models FOR EACH ROW
        WHEN ((to_jsonb(OLD) - 'last_version_number') IS DISTINCT FROM
              (to_jsonb(NEW) - 'last_version_number'))
        EXECUTE FUNCTION llmcp_notify_change()""")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER llmcp_notify_change_update ON models")
    op.execute("DROP TRIGGER llmcp_notify_change ON models")
    op.execute(STATEMENT_TRIGGER.format(events="INSERT OR UPDATE OR DELETE OR TRUNCATE"))
