"""PostgreSQL notifies channel llmcp_changes when a table that API processes cache changes

Revision ID: d7b3e9a1c5f2
Revises: c4a8e2f6b1d3
Create Date: 2026-12-04 12:00:00

Each API process keeps the answers to its hottest reads (tokens, versions) in memory and empties
them on these notifications (control_plane/read_cache.py). A statement-level trigger costs one
call per statement, not per row; PostgreSQL folds a transaction's identical notifications into
one and delivers them at commit. SQLite has no notifications: there the cache stays off.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "d7b3e9a1c5f2"
down_revision: str | None = "c4a8e2f6b1d3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The tables cached answers are made of (control_plane/read_cache.py's CACHED_TABLES, as they
# were when this ran: a later migration that caches more adds its own triggers).
CACHED_TABLES = ("api_tokens", "models", "model_versions")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("""
        CREATE FUNCTION llmcp_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('llmcp_changes', TG_TABLE_NAME);
            RETURN NULL;
        END;
        $$""")
    for table in CACHED_TABLES:
        op.execute(f"CREATE TRIGGER llmcp_notify_change AFTER INSERT OR UPDATE OR DELETE OR "
                   f"TRUNCATE ON {table} FOR EACH STATEMENT EXECUTE FUNCTION "
                   f"llmcp_notify_change()")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in CACHED_TABLES:
        op.execute(f"DROP TRIGGER IF EXISTS llmcp_notify_change ON {table}")
    op.execute("DROP FUNCTION IF EXISTS llmcp_notify_change()")
