"""Which tritonserver runs: $TRITONSERVER, then /opt/tritonserver, then the bundled one."""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.triton import runtime


def _fake_install(root: Path) -> Path:
    binary = root / "bin" / "tritonserver"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    backend = root / "backends" / "python"
    backend.mkdir(parents=True)
    (backend / "libtriton_python.so").write_text("")
    return binary


@pytest.fixture(autouse=True)
def private_backends_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "BACKENDS_DIR", tmp_path / "backends-dir")


def test_tritonserver_env_wins_and_gets_our_backend_beside_its_python_backend(tmp_path, monkeypatch):
    binary = _fake_install(tmp_path / "triton")
    monkeypatch.setenv("TRITONSERVER", str(binary))
    found = runtime.locate()
    assert found.binary == binary and not found.bundled
    assert (found.backends_dir / "python").resolve() == (tmp_path / "triton/backends/python").resolve()
    assert (found.backends_dir / runtime.BACKEND_NAME / "model.py").exists()


def test_tritonserver_env_pointing_nowhere_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITONSERVER", str(tmp_path / "missing"))
    with pytest.raises(runtime.TritonRuntimeError, match="is not a file"):
        runtime.locate()


def test_installed_triton_without_python_backend_is_an_error(tmp_path, monkeypatch):
    binary = tmp_path / "bin" / "tritonserver"
    binary.parent.mkdir(parents=True)
    binary.write_text("")
    monkeypatch.setenv("TRITONSERVER", str(binary))
    with pytest.raises(runtime.TritonRuntimeError, match="no Python backend"):
        runtime.locate()


def test_without_env_or_install_the_bundled_server_is_used(monkeypatch):
    monkeypatch.delenv("TRITONSERVER", raising=False)
    monkeypatch.setattr(runtime, "INSTALLED_TRITON", Path("/nonexistent/tritonserver"))
    found = runtime.locate()
    assert found.bundled
    assert found.binary.name == "tritonserver" and found.binary.exists()
    assert any("nvidia_pytriton.libs" in path for path in found.library_path)
