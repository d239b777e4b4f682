"""The installed ``llmctl`` console script, run as a subprocess against the real app served by
uvicorn (``live_url``) on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import yaml

from control_plane.llmctl.errors import ERROR_DOCUMENT_SCHEMA

LLMCTL = Path(sys.executable).parent / "llmctl"
# What a CI log must never hold: ANSI escapes, carriage returns, any control character but
# newline and tab.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# Nothing here is a terminal, and nothing of the developer's own set-up may leak in.
_KEPT_VARIABLES = ("PATH", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str

    def document(self) -> Any:
        """stdout as one JSON document: json.loads refuses anything before or after it."""
        return json.loads(self.stdout)

    def error_document(self, exit_code: int) -> dict[str, Any]:
        """The --json error document, checked against its published schema."""
        assert self.code == exit_code, self
        document: dict[str, Any] = self.document()
        jsonschema.validate(document, ERROR_DOCUMENT_SCHEMA)
        assert document["exit_code"] == exit_code
        return document


Llmctl = Callable[..., Run]


def secret_of(headers: Mapping[str, str]) -> str:
    return headers["Authorization"].removeprefix("Bearer ")


def api(live_url: str, headers: Mapping[str, str]) -> httpx.Client:
    """The API itself, for setting up what a test's commands work on. The first registration
    of a session imports the engine-argument checks (seconds), hence the long timeout."""
    return httpx.Client(base_url=f"{live_url}/api/v1", headers=dict(headers), timeout=120)


@pytest.fixture
def run_llmctl(tmp_path: Path) -> Llmctl:
    """llmctl with only the environment given (HOME is empty: no config file of the user's)."""
    home = tmp_path / "home"
    home.mkdir()

    def run(*args: str, env: Mapping[str, str] | None = None, timeout: float = 120) -> Run:
        base = {name: os.environ[name] for name in _KEPT_VARIABLES if name in os.environ}
        completed = subprocess.run([str(LLMCTL), *args], env={**base, "HOME": str(home),
                                                               **(env or {})},
                                   capture_output=True, text=True, timeout=timeout,
                                   stdin=subprocess.DEVNULL, check=False)
        return Run(completed.returncode, completed.stdout, completed.stderr)

    return run


@pytest.fixture
def llmctl(run_llmctl: Llmctl, live_url: str, admin: dict[str, str]) -> Llmctl:
    """llmctl pointed at the live app through LLMCP_URL/LLMCP_TOKEN (admin unless ``token``)."""

    def run(*args: str, token: str | None = None, env: Mapping[str, str] | None = None,
            timeout: float = 120) -> Run:
        return run_llmctl(*args, env={"LLMCP_URL": live_url,
                                      "LLMCP_TOKEN": token or secret_of(admin), **(env or {})},
                          timeout=timeout)

    return run


@pytest.fixture
def weights(source_root: Path) -> Path:
    """A local model source the registry accepts (under the configured source root)."""
    directory = source_root / "tiny-weights"
    directory.mkdir(exist_ok=True)
    (directory / "model.safetensors").write_bytes(b"weights")
    return directory


def in_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run llmctl with a pseudo-terminal as its stdin, stdout and stderr: its exit code and
    all it wrote (the terminal turns each newline into CR LF)."""
    leader, follower = pty.openpty()
    process = subprocess.Popen([str(LLMCTL), *args], stdin=follower, stdout=follower,
                               stderr=follower, env=env, close_fds=True)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process has exited and closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return process.wait(timeout=60), b"".join(chunks).decode(errors="replace")


def write_manifest(directory: Path, name: str, manifest: dict[str, Any]) -> Path:
    """``manifest`` as YAML or JSON, by the suffix of ``name``."""
    path = directory / name
    text = json.dumps(manifest) if name.endswith(".json") else yaml.safe_dump(manifest)
    path.write_text(text, encoding="utf-8")
    return path
