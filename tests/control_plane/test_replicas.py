"""Two replicas of ``llm-control-plane serve`` with two API workers each, on one PostgreSQL
database, as an operator would run them: every operation runs once whichever worker accepted it,
one operation at a time works on a deployment whichever worker asks, one process of the four
reconciles, and a worker killed with SIGKILL mid-operation loses nothing: its operation is failed
as interrupted by another process once its claim lapses, and the deployment is free again.

The node is a TCP listener that accepts and never answers (a Triton that hangs), so a
deployment's operation stays running long enough to kill the worker that runs it.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.orm import Session, sessionmaker

from control_plane.leader import advisory_lock_key
from control_plane.operations.orm import Operation
from control_plane.triton.runtime import CACHE_DIR
from tests.control_plane.conftest import fresh_database
from tests.control_plane.deployments.support import ControlPlane, wait_until

MODEL_DIR = (CACHE_DIR / "models" / "SmolLM2-135M-Instruct").resolve()
# Long enough that a live process under CI's load (two cores, four processes hashing the model
# at once beside another test lane) always renews its claims in time: at 3 s one validation was
# once failed as interrupted while it still ran. Part 4 waits about this long after its kill.
LEASE_S = 8
DEPLOYMENT = "/api/v1/models/m/aliases/production/deployments/hung"


class HungNode:
    """Accepts connections and never answers them."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(connection)

    def close(self) -> None:
        self.listener.close()
        for connection in self.held:
            connection.close()


@pytest.fixture
def database_url(tmp_path: Path) -> Iterator[str]:
    with fresh_database("postgresql", tmp_path) as url:
        yield url


@pytest.fixture
def replicas(tmp_path: Path, database_url: str) -> Iterator[list[ControlPlane]]:
    started = []
    try:
        for index in range(2):
            directory = tmp_path / f"replica-{index}"
            directory.mkdir()
            replica = ControlPlane(directory, database_url,
                                   log_name=f"test-replicas-{index}")
            replica.env.update({"LLMCP_OPERATION_LEASE_SECONDS": str(LEASE_S),
                                "LLMCP_RECONCILE_INTERVAL_SECONDS": "1"})
            replica.start(workers=2).close()
            started.append(replica)
        yield started
    finally:
        for replica in started:
            replica.stop()


def operations(factory: sessionmaker[Session]) -> list[Operation]:
    with factory() as session:
        return list(session.scalars(select(Operation)).all())


def clients(replicas: list[ControlPlane]) -> list[httpx.Client]:
    # A new connection per request: uvicorn's workers share the port, so each request lands on
    # whichever worker accepts it.
    return [httpx.Client(base_url=r.url, headers={**r.headers, "Connection": "close"},
                         timeout=60) for r in replicas]


def test_two_replicas_of_two_workers_share_one_database(
        replicas: list[ControlPlane], database_url: str) -> None:
    engine = create_engine(database_url)
    factory = sessionmaker(engine)
    node = HungNode()
    first, second = http = clients(replicas)
    try:
        assert first.post("/api/v1/models", json={"name": "m"}).status_code == 201
        created = first.post("/api/v1/models/m/versions", json={"source": str(MODEL_DIR)})
        assert created.status_code == 201, created.text
        number = created.json()["number"]
        assert second.put("/api/v1/models/m/aliases/production",
                          json={"version": number}).status_code in (200, 201)

        # 1. Twenty validations asked of both replicas at once: each runs once, none is lost.
        with ThreadPoolExecutor(8) as pool:
            started = list(pool.map(
                lambda i: http[i % 2].post(f"/api/v1/models/m/versions/{number}/validate"),
                range(20)))
        accepted = [r for r in started if r.status_code == 202]
        # One asked after a validation had already succeeded is refused: the version is
        # validated (on a loaded machine the first ones can end before the last are asked).
        late = [r for r in started if r.status_code != 202]
        assert all(r.status_code == 409 and r.json()["error"] == "InvalidStateTransition"
                   and "is validated" in r.json()["detail"] for r in late), [r.text for r in late]
        # The first eight are asked together, while a validation hashes the model's 260 MB:
        # several are running at once, or the test shows nothing.
        assert len(accepted) >= 2, [r.text for r in started]
        ids = {r.json()["id"] for r in accepted}
        assert len(ids) == len(accepted)

        def all_ended() -> list[Operation] | None:
            rows = [o for o in operations(factory) if o.id in ids]
            return rows if all(o.status in ("succeeded", "failed") for o in rows) else None

        validations = wait_until(all_ended, "the validations to end", 120, 0.5)
        assert len(validations) == len(accepted)
        # Each ran once; one validated the version, the others found it validated meanwhile.
        assert {o.attempts for o in validations} == {1}
        assert sorted(o.status for o in validations) == \
            ["failed"] * (len(accepted) - 1) + ["succeeded"]
        assert all("while it was being validated" in (o.error or "")
                   for o in validations if o.status == "failed"), \
            [o.error for o in validations if o.status == "failed"]
        runners = {o.claimed_by for o in validations}
        print(f"[replicas] {len(accepted)} validations accepted ({len(late)} asked after one had "
              f"validated the version) ran in {len(runners)} of the 4 processes")

        # 2. One process of the four holds the reconciler's lock.
        key = advisory_lock_key("reconciler") & 0xFFFF_FFFF_FFFF_FFFF
        with engine.connect() as connection:
            holders = connection.execute(text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
                "database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND classid = CAST(:high AS oid) AND objid = CAST(:low AS oid)"),
                {"high": key >> 32, "low": key & 0xFFFF_FFFF}).scalar()
        assert holders == 1

        # 3. Sixteen requests at once to deploy the alias on one node, through every worker:
        # one operation starts, the others are refused while it is unfinished.
        assert first.post("/api/v1/nodes", json={
            "name": "hung", "http_url": f"http://127.0.0.1:{node.port}",
            "grpc_url": f"127.0.0.1:{node.port}"}).status_code == 201
        with ThreadPoolExecutor(16) as pool:
            asked = list(pool.map(lambda i: http[i % 2].put(DEPLOYMENT), range(16)))
        accepted = [r.json()["operation"]["id"] for r in asked if r.status_code == 202]
        refused = [r.json() for r in asked if r.status_code != 202]
        assert accepted and all(r["error"] == "OperationInProgress" for r in refused), refused
        # Accepted ones never overlapped: each was asked for after the one before had ended.
        applies = sorted((o for o in operations(factory) if o.id in accepted),
                         key=lambda o: o.created_at)
        print("[replicas] deploy burst:", len(accepted), "accepted,", len(refused), "refused;",
              [(o.status, o.error) for o in applies])
        for before, after in itertools.pairwise(applies):
            assert before.finished_at is not None and before.finished_at <= after.created_at
        following = [applies[-1].id]

        # 4. The worker running it is killed; another process fails it once its claim lapses.
        def claimed() -> Operation | None:
            row = next(o for o in operations(factory) if o.id == following[-1])
            if row.status in ("succeeded", "failed"):
                # It gave up on the node before the kill (it answers nothing, so a call times
                # out): ask again and follow the new one.
                again = http[0].put(DEPLOYMENT)
                if again.status_code == 202:
                    following.append(again.json()["operation"]["id"])
                return None
            return row if row.status == "running" and row.claimed_by else None

        running = wait_until(claimed, "the deployment's operation to be claimed", 60, 0.05)
        operation_id = running.id
        assert running.claimed_by is not None
        pid = int(running.claimed_by.split(":")[1])
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        def ended_row() -> Operation | None:
            row = next(o for o in operations(factory) if o.id == operation_id)
            return row if row.status != "running" else None

        ended = wait_until(ended_row, "the operation to end", 60, 0.2)
        print(f"[replicas] operation of the killed worker failed "
              f"{time.monotonic() - killed_at:.1f} s after SIGKILL (lease {LEASE_S} s)")
        assert ended.status == "failed" and ended.error is not None
        assert ended.error.startswith("interrupted:"), ended.error
        assert ended.attempts == 1

        # The deployment is free again: a new request starts a new operation.
        def accepted_again() -> dict[str, Any] | None:
            response = http[1].delete(DEPLOYMENT)
            return response.json() if response.status_code == 202 else None

        removal = wait_until(accepted_again, "a removal to be accepted", 30, 0.5)
        assert removal["operation"]["id"] != operation_id
        # Nothing ran twice, nothing is left claimed by the dead process.
        assert all(o.attempts <= 1 for o in operations(factory))
        assert not [o for o in operations(factory)
                    if o.status == "running" and o.claimed_by == running.claimed_by]
    finally:
        for client in http:
            client.close()
        node.close()
        engine.dispose()
