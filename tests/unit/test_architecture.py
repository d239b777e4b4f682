"""The house's import rules, as import-linter contracts in pyproject.toml: the domain core
(services, repositories, tables, pure policies) reaches no web framework, Triton client, NVML or
Redis, directly or through another module; and no two of the control plane's packages depend on
each other, however indirectly (no cycles)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint), "--no-cache"], cwd=PROJECT_ROOT, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout, result.stdout
