"""Find a tritonserver binary and lay out the backend directory our models need.

Order of preference: ``$TRITONSERVER``, ``/opt/tritonserver/bin/tritonserver``, then the server
bundled in the ``nvidia-pytriton`` wheel (copied into a writable tree, because the wheel's own
tree lacks the Python backend stub next to ``libtriton_python.so``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from control_plane.paths import CACHE_DIR, PROJECT_ROOT

# Re-exported: many callers read the cache directory from here.
__all__ = ["CACHE_DIR", "PROJECT_ROOT"]

BUNDLED_TREE = CACHE_DIR / "tritonserver"
BACKENDS_DIR = CACHE_DIR / "backends"
INSTALLED_TRITON = Path("/opt/tritonserver/bin/tritonserver")
# The name models use in `backend: "..."`; Triton looks for <backend dir>/<name>/model.py.
BACKEND_NAME = "llm_vllm"
BACKEND_SOURCE = PROJECT_ROOT / "llm_backend"


class TritonRuntimeError(RuntimeError):
    """The Triton runtime cannot be found or prepared."""


@dataclass(frozen=True)
class TritonRuntime:
    """A tritonserver binary plus the directories and environment it runs with."""

    binary: Path
    backends_dir: Path
    cache_dir: Path
    library_path: tuple[str, ...]
    bundled: bool

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for the server: the venv first on PATH so the stub embeds its Python."""
        env = dict(os.environ if base is None else base)
        venv_bin = str(Path(sys.executable).parent)
        env["PATH"] = os.pathsep.join([venv_bin, env.get("PATH", "")])
        if self.library_path:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                [*self.library_path, env.get("LD_LIBRARY_PATH", "")]
            ).rstrip(os.pathsep)
        return env


def _pytriton_dir() -> Path:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise TritonRuntimeError(
            "no tritonserver found: set $TRITONSERVER, install Triton in /opt/tritonserver, "
            "or run scripts/bootstrap.sh to install the bundled one (nvidia-pytriton)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _prepare_bundled_tree() -> Path:
    """Copy the wheel's server tree once and put the stub for this Python beside the backend."""
    binary = BUNDLED_TREE / "bin" / "tritonserver"
    if binary.exists():
        return BUNDLED_TREE
    source = _pytriton_dir() / "tritonserver"
    staging = BUNDLED_TREE.with_name(BUNDLED_TREE.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging, symlinks=True)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = staging / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise TritonRuntimeError(f"the bundled Triton has no Python backend stub for Python {version}")
    shutil.copy2(stub, staging / "backends" / "python" / "triton_python_backend_stub")
    staging.rename(BUNDLED_TREE)
    return BUNDLED_TREE


def _bundled_library_path() -> tuple[str, ...]:
    libs = _pytriton_dir().parent / "nvidia_pytriton.libs"
    # The stub embeds libpython; it must be the same one the venv runs.
    return (str(libs), str(sysconfig.get_config_var("LIBDIR")))


def _link(link: Path, target: Path) -> None:
    if link.is_symlink() and link.resolve() == target.resolve():
        return
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target, target_is_directory=True)


def _prepare_backends_dir(python_backend: Path) -> Path:
    """A backend directory holding Triton's Python backend and ours (a Python-based backend)."""
    BACKENDS_DIR.mkdir(parents=True, exist_ok=True)
    _link(BACKENDS_DIR / "python", python_backend)
    _link(BACKENDS_DIR / BACKEND_NAME, BACKEND_SOURCE)
    return BACKENDS_DIR


def locate() -> TritonRuntime:
    """Pick the tritonserver binary and prepare what it needs (idempotent)."""
    explicit = os.environ.get("TRITONSERVER")
    if explicit or INSTALLED_TRITON.exists():
        binary = Path(explicit) if explicit else INSTALLED_TRITON
        if not binary.is_file():
            raise TritonRuntimeError(f"$TRITONSERVER={explicit} is not a file")
        python_backend = binary.resolve().parent.parent / "backends" / "python"
        if not (python_backend / "libtriton_python.so").exists():
            raise TritonRuntimeError(f"{binary} has no Python backend at {python_backend}")
        return TritonRuntime(
            binary=binary,
            backends_dir=_prepare_backends_dir(python_backend),
            cache_dir=binary.resolve().parent.parent / "caches",
            library_path=(str(sysconfig.get_config_var("LIBDIR")),),
            bundled=False,
        )
    tree = _prepare_bundled_tree()
    return TritonRuntime(
        binary=tree / "bin" / "tritonserver",
        backends_dir=_prepare_backends_dir(tree / "backends" / "python"),
        cache_dir=tree / "caches",
        library_path=_bundled_library_path(),
        bundled=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=["prepare"])
    parser.parse_args()
    runtime = locate()
    kind = "bundled (nvidia-pytriton)" if runtime.bundled else "installed"
    print(f"triton: {runtime.binary} [{kind}], backends in {runtime.backends_dir}")


if __name__ == "__main__":
    main()
