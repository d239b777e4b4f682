"""The migrations build exactly the ORM's schema, and undo it, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

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


def test_the_version_counter_starts_from_each_models_versions_and_its_undo_keeps_them(
        backend: str, tmp_path: Path) -> None:
    # Versions stored before the counter existed: it must not give their numbers again.
    before_counter, counter = "d7b3e9a1c5f2", "e5a1c7d3b9f4"
    with fresh_database(backend, tmp_path) as url:
        migrate.upgrade(url, before_counter)
        engine = make_engine(url)
        try:
            with engine.begin() as connection:
                for name in ("three", "one", "none"):
                    connection.execute(text(
                        "INSERT INTO models (name, description, labels, created_at, updated_at, "
                        "revision) VALUES (:name, '', '{}', CURRENT_TIMESTAMP, "
                        "CURRENT_TIMESTAMP, 1)"), {"name": name})
                for name, count in (("three", 3), ("one", 1)):
                    for number in range(1, count + 1):
                        connection.execute(text(
                            "INSERT INTO model_versions (model_id, number, source, engine_args, "
                            "serving, triton_config, resources, gates, state, labels, "
                            "created_by, created_at, updated_at, revision) SELECT id, :number, "
                            "'hf://org/m', '{}', '{}', '{}', '{}', '{}', 'registered', '{}', "
                            "'t', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, 1 FROM models "
                            "WHERE name = :name"), {"name": name, "number": number})

            def counters() -> dict[str, int]:
                with engine.connect() as connection:
                    rows = connection.execute(
                        text("SELECT name, last_version_number FROM models"))
                    return {name: number for name, number in rows}

            def versions() -> int:
                with engine.connect() as connection:
                    return connection.execute(text("SELECT count(*) FROM model_versions")
                                              ).scalar_one()

            migrate.upgrade(url, counter)
            assert counters() == {"three": 3, "one": 1, "none": 0}
            # Undone and done again, the versions stay: on SQLite a rebuilt models table
            # would have taken them with it (ON DELETE CASCADE).
            migrate.downgrade(url, before_counter)
            assert versions() == 4
            migrate.upgrade(url, counter)
            assert versions() == 4
            assert counters() == {"three": 3, "one": 1, "none": 0}
        finally:
            engine.dispose()
