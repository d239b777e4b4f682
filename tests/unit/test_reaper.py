"""Tests for llm_backend.reaper with real processes: a parent (the 'stub') with a child
(the 'engine'), and the reaper watching the parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.timeout(30)

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT_WAIT_S = 1.5

# Starts a long-lived child and prints its PID, then sleeps.
PARENT_CODE = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.fixture
def procs():
    """Processes started by a test; whatever is left is killed afterwards (by PID)."""
    started: list[subprocess.Popen] = []
    extra_pids: list[int] = []
    yield started, extra_pids
    for pid in extra_pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for stream in (proc.stdin, proc.stdout):
            if stream:
                try:
                    stream.close()
                except OSError:
                    pass


def start_parent(procs) -> tuple[subprocess.Popen, int]:
    started, extra = procs
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT_CODE], stdout=subprocess.PIPE, text=True
    )
    started.append(parent)
    child_pid = int(parent.stdout.readline())
    extra.append(child_pid)
    assert psutil.pid_exists(child_pid)
    assert child_pid in [p.pid for p in psutil.Process(parent.pid).children()]
    return parent, child_pid


def start_reaper(procs, watch: list[int], owner: int) -> subprocess.Popen:
    started, _ = procs
    args = [sys.executable, "-m", "llm_backend.reaper"]
    for pid in watch:
        args += ["--watch", str(pid)]
    args += ["--owner", str(owner)]
    reaper = subprocess.Popen(args, stdin=subprocess.PIPE, text=True, cwd=REPO)
    started.append(reaper)
    return reaper


def test_parent_killed_kills_its_child(procs):
    parent, child_pid = start_parent(procs)
    reaper = start_reaper(procs, [parent.pid], parent.pid)
    time.sleep(SNAPSHOT_WAIT_S)
    assert reaper.poll() is None, "reaper must keep watching while the parent lives"

    parent.send_signal(signal.SIGKILL)
    assert wait_until(lambda: gone(child_pid), 5.0), "the orphaned child must be killed"
    assert reaper.wait(timeout=5) == 1
    parent.wait(timeout=5)


def test_stop_on_stdin_exits_zero_and_leaves_child(procs):
    parent, child_pid = start_parent(procs)
    reaper = start_reaper(procs, [parent.pid], parent.pid)
    time.sleep(SNAPSHOT_WAIT_S)
    reaper.stdin.write("stop\n")
    reaper.stdin.flush()
    assert reaper.wait(timeout=5) == 0
    time.sleep(0.2)
    assert not gone(child_pid)
    assert parent.poll() is None

    # after a clean stop, the parent dying no longer takes its child with it
    parent.kill()
    parent.wait(timeout=5)
    time.sleep(0.5)
    assert not gone(child_pid)


def test_stdin_closed_without_stop_kills_descendants(procs):
    parent, child_pid = start_parent(procs)
    reaper = start_reaper(procs, [parent.pid], parent.pid)
    time.sleep(SNAPSHOT_WAIT_S)
    reaper.stdin.close()
    assert reaper.wait(timeout=5) == 1
    assert wait_until(lambda: gone(child_pid), 5.0)


def test_other_lines_are_ignored(procs):
    parent, child_pid = start_parent(procs)
    reaper = start_reaper(procs, [parent.pid], parent.pid)
    time.sleep(SNAPSHOT_WAIT_S)
    reaper.stdin.write("hello\n")
    reaper.stdin.flush()
    time.sleep(0.7)
    assert reaper.poll() is None
    assert not gone(child_pid)
    reaper.stdin.write("stop\n")
    reaper.stdin.flush()
    assert reaper.wait(timeout=5) == 0


def test_second_watched_process_dying_kills_owner_and_its_child(procs):
    started, _ = procs
    parent, child_pid = start_parent(procs)
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started.append(server)
    reaper = start_reaper(procs, [parent.pid, server.pid], parent.pid)
    time.sleep(SNAPSHOT_WAIT_S)

    server.send_signal(signal.SIGKILL)
    server.wait(timeout=5)
    assert reaper.wait(timeout=5) == 1
    assert wait_until(lambda: gone(child_pid), 5.0)
    assert parent.wait(timeout=5) == -signal.SIGKILL


def test_requires_watch_and_owner():
    result = subprocess.run(
        [sys.executable, "-m", "llm_backend.reaper", "--owner", "1"],
        check=False, cwd=REPO, capture_output=True, text=True, timeout=20,
    )
    assert result.returncode == 2
    assert "--watch" in result.stderr
