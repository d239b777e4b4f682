"""The migrations build exactly the ORM's schema, and undo it, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from control_plane import migrate
from control_plane.db import make_engine
from control_plane.metadata import target_metadata
from tests.control_plane.conftest import fresh_database

TABLES = {"alias_moves", "api_tokens", "audit_events", "idempotency_keys", "model_aliases",
          "deployments", "gpu_reservations", "models", "model_versions", "node_status", "operations",
          "triton_nodes", "promotions", "webhook_subscriptions", "webhook_events",
          "webhook_deliveries", "tenants", "inference_api_keys", "adapters",
          "deployment_adapters", "tenant_usage", "usage_reports", "scaling_policies",
          "scaling_decisions", "gpu_evacuations", "operation_locks"}


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def _differences(url: str) -> list[object]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            return list(compare_metadata(context, target_metadata))
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade_round_trip(backend: str, tmp_path: Path) -> None:
    with fresh_database(backend, tmp_path) as url:
        migrate.upgrade(url)
        assert _tables(url) == TABLES
        migrate.downgrade(url)
        assert _tables(url) == set()
        migrate.upgrade(url)
        assert _tables(url) == TABLES


def test_autogenerate_finds_no_difference_between_orm_and_migrations(
        backend: str, tmp_path: Path) -> None:
    with fresh_database(backend, tmp_path) as url:
        migrate.upgrade(url)
        assert _differences(url) == []
