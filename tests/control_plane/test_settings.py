"""Settings come from LLMCP_* variables and an optional .env file."""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.settings import DEFAULT_DATABASE_PATH, Settings
from control_plane.triton.runtime import CACHE_DIR


def test_defaults_use_an_embedded_sqlite_file_under_the_cache(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LLMCP_DATABASE_URL", raising=False)
    settings = Settings()
    assert settings.database_url == f"sqlite:///{DEFAULT_DATABASE_PATH}"
    assert DEFAULT_DATABASE_PATH.parent == CACHE_DIR
    assert settings.source_roots == [CACHE_DIR / "models"]


def test_environment_variables_with_prefix_override_defaults(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMCP_DATABASE_URL", "postgresql+psycopg://cp@db/cp")
    monkeypatch.setenv("LLMCP_SOURCE_ROOTS", '["/models", "/mnt/weights"]')
    monkeypatch.setenv("LLMCP_PORT", "9090")
    settings = Settings()
    assert settings.database_url == "postgresql+psycopg://cp@db/cp"
    assert settings.source_roots == [Path("/models"), Path("/mnt/weights")]
    assert settings.port == 9090


def test_dotenv_file_in_the_working_directory_is_read(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LLMCP_DATABASE_URL", raising=False)
    (tmp_path / ".env").write_text("LLMCP_DATABASE_URL=sqlite:////srv/cp.db\n")
    assert Settings().database_url == "sqlite:////srv/cp.db"
