"""Every test module that loads real models runs in the engine lane (tests/conftest.py), so two of
them never hold engines side by side in two workers (memory)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ENGINE_LANE, ROOT, lane_of

MARKED = re.compile(r"^pytestmark = \[?pytest\.mark\.integration\b", re.MULTILINE)


def test_every_module_marked_integration_is_in_the_engine_lane() -> None:
    marked = sorted(path.relative_to(ROOT).as_posix()
                    for path in (ROOT / "tests").rglob("test_*.py")
                    if MARKED.search(path.read_text()))
    assert "tests/control_plane/promotions/test_promotions_e2e.py" in marked
    outside = [module for module in marked if lane_of(module) != ENGINE_LANE]
    assert outside == [], f"add these to ENGINE_MODULES in tests/conftest.py: {outside}"


def test_the_lanes() -> None:
    assert lane_of("tests/integration/gateway/test_gateway_limits.py::test_x") == ENGINE_LANE
    assert lane_of("tests/control_plane/deployments/test_faults.py::test_y[sqlite]") == ENGINE_LANE
    assert lane_of("tests/unit/test_chat.py::test_z") == "tests/unit/test_chat.py"


def test_the_suite_runs_without_xdist_too() -> None:
    # The lanes' hook is xdist's: registered without xdist, pytest stopped at collection with an
    # internal error ("unknown hook 'pytest_xdist_make_scheduler'").
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
         "tests/unit/test_engine_lane.py::test_the_lanes"],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 passed" in ran.stdout


def test_a_distribution_asked_for_by_name_is_the_one_that_runs() -> None:
    # The lanes replace xdist's default only: with ``--dist each`` every worker runs every test
    # (the lanes would have run it once).
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
         "--dist", "each", "tests/unit/test_engine_lane.py::test_the_lanes"],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "2 passed" in ran.stdout, ran.stdout
