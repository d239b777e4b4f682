"""Running the Alembic migrations from code (CLI, tests) against any database URL."""

from __future__ import annotations

from alembic import command
from alembic.config import Config

from control_plane.triton.runtime import PROJECT_ROOT

ALEMBIC_INI = PROJECT_ROOT / "alembic.ini"


def alembic_config(url: str) -> Config:
    """Alembic's config for this repository, pointed at ``url`` and leaving logging alone."""
    config = Config(str(ALEMBIC_INI))
    config.attributes["url"] = url
    config.attributes["configure_logging"] = False
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)
