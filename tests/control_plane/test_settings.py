"""Settings come from LLMCP_* variables and an optional .env file."""

from __future__ import annotations

import os
import subprocess
import sys
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


def test_secrets_come_from_files_in_the_secrets_dir(tmp_path: Path) -> None:
    """Compose and Kubernetes mount secrets as files: LLMCP_SECRETS_DIR and LLMGW_SECRETS_DIR
    name a directory whose files are variables' values."""
    (tmp_path / "llmcp_database_url").write_text("postgresql+psycopg://llmcp:s3cret@db/llmcp\n")
    (tmp_path / "llmgw_control_plane_token").write_text("llmcp_from-a-file")
    code = ("from control_plane.settings import Settings; from gateway.settings import "
            "GatewaySettings; print(Settings().database_url); "
            "print(GatewaySettings().control_plane_token.get_secret_value())")
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("LLMCP_", "LLMGW_"))}
    result = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                            text=True, cwd=tmp_path,
                            env={**environment, "LLMCP_SECRETS_DIR": str(tmp_path),
                                 "LLMGW_SECRETS_DIR": str(tmp_path)})
    assert result.stdout.split() == ["postgresql+psycopg://llmcp:s3cret@db/llmcp",
                                     "llmcp_from-a-file"]
