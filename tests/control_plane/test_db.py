"""The unit of work commits on success and leaves nothing behind on error."""

from __future__ import annotations

from datetime import UTC

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction
from control_plane.registry.orm import Model


def test_transaction_commits_on_success(session_factory: sessionmaker[Session]) -> None:
    with transaction(session_factory) as session:
        session.add(Model(name="kept"))
    with session_factory() as session:
        model = session.scalars(select(Model)).one()
    assert model.name == "kept"
    assert model.created_at.tzinfo is not None
    assert model.created_at.utcoffset() == UTC.utcoffset(None)


def test_transaction_rolls_back_everything_on_error(
        session_factory: sessionmaker[Session]) -> None:
    with pytest.raises(RuntimeError, match="boom"), transaction(session_factory) as session:
        session.add(Model(name="first"))
        session.flush()
        session.add(Model(name="second"))
        session.flush()
        raise RuntimeError("boom")
    with session_factory() as session:
        assert session.scalars(select(Model)).all() == []
