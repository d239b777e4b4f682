"""Several control-plane replicas on one database: exactly one reconciles, and another takes over
when it stops (a PostgreSQL advisory lock; a file lock beside SQLite)."""

from __future__ import annotations

import time

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from control_plane.app import create_app
from control_plane.settings import Settings


def leading(app: FastAPI) -> bool:
    return bool(app.state.elections) and app.state.elections[-1].is_leader


def wait_for(predicate, timeout: float = 15.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def test_one_replica_reconciles_and_another_takes_over(settings: Settings, db: Engine) -> None:
    first, second = create_app(settings, engine=db), create_app(settings, engine=db)
    first_client = TestClient(first).__enter__()
    first_running = True
    try:
        assert wait_for(lambda: leading(first))
        with TestClient(second):
            time.sleep(2.5)  # a poll interval later, still exactly one: the first
            assert (leading(first), leading(second)) == (True, False)
            passes = second.state.reconciler.passes
            second.state.reconciler.trigger()
            time.sleep(0.5)
            # The standby's reconciler wakes up but does not act.
            assert second.state.reconciler.passes == passes

            first_client.__exit__(None, None, None)  # the leader stops
            first_running = False
            assert wait_for(lambda: leading(second), timeout=10)
            passes = second.state.reconciler.passes
            second.state.reconciler.trigger()
            assert wait_for(lambda: second.state.reconciler.passes > passes, timeout=10)
        assert not leading(second)
    finally:
        if first_running:
            first_client.__exit__(None, None, None)
