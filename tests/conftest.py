"""How the suite shares this machine when pytest-xdist runs it in several workers (`make test`
runs two).

Two lanes. Every module that loads a real model (marked ``integration``: a real tritonserver with
the real backend) is one unit of work, run by one worker in order, so engines live in one worker
at a time, as in a run with no workers: an engine on a CPU holds about 3 GiB, and two such
modules side by side took this 24 GiB machine out of memory (seen: the kernel killed an engine).
Every other module is a unit of its own, for whichever worker is free. A model load is three
interpreters importing torch and vLLM one after another, so the engine lane alone leaves a core
idle about half the time: the other lane fills it.

The lanes are chosen here (``pytest_xdist_make_scheduler``) rather than with ``xdist_group``
marks: pytest-xdist 3.8 puts a mark's group into the test's node id through an attribute pytest
9 no longer has, so the marks group nothing. The controller sees node ids only, so the engine
lane is named by path below; tests/unit/test_engine_lane.py fails when a module marked
``integration`` is missing from it. They take the place of xdist's default distribution ("load")
only: ``--dist loadfile``, ``each`` or another asked for by name runs as asked.

A vLLM engine on a CPU also binds its compute threads to a core; left to itself ("auto") it takes
core 0, whichever worker started it. Each worker's engines get the worker's own core (a test that
pins its nodes itself, ``running_nodes(..., own_cores=True)``, still does)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

ENGINE_LANE = "engines"
ENGINE_PACKAGES = ("tests/integration/",)
ENGINE_MODULES = frozenset({
    "tests/control_plane/adapters/test_adapters_e2e.py",
    "tests/control_plane/deployments/test_faults.py",
    "tests/control_plane/deployments/test_lifecycle.py",
    "tests/control_plane/deployments/test_triton_version.py",
    "tests/control_plane/promotions/test_promotions_e2e.py",
    "tests/control_plane/reservations/test_gpu_evacuation.py",
    "tests/control_plane/reservations/test_placement_e2e.py",
})
ROOT = Path(__file__).resolve().parent.parent

_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(int(_WORKER[2:]) % (os.cpu_count() or 1))


def lane_of(nodeid: str) -> str:
    """The unit of work a test belongs to: the engine lane, or its own module."""
    module = nodeid.split("::", 1)[0]
    if module.startswith(ENGINE_PACKAGES) or module in ENGINE_MODULES:
        return ENGINE_LANE
    return module


class EngineLaneScheduling(LoadScopeScheduling):
    def _split_scope(self, nodeid: str) -> str:
        return lane_of(nodeid)


class EngineLanes:
    """The lanes, as a plugin: registered only when pytest-xdist is loaded, as pytest refuses a
    hook it has no specification for (``-p no:xdist`` stopped with an internal error)."""

    @staticmethod
    def pytest_xdist_make_scheduler(config: pytest.Config,
                                    log: object) -> LoadScopeScheduling | None:
        # Only in place of xdist's default ("load"): a distribution asked for by name
        # (``--dist loadfile``, ``each``...) is the one that runs. None: xdist's own choice.
        if config.getoption("dist") != "load":
            return None
        return EngineLaneScheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(EngineLanes(), "engine-lanes")
