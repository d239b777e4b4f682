"""Kills the vLLM engine processes if the Triton stub that owns them dies without unloading.

vLLM's engine core and workers are separate processes; when tritonserver or its stub is killed
(-9), nobody shuts them down and they keep gigabytes. The stub starts this watcher as a child
process; it remembers the stub's descendants and kills them once the stub (or tritonserver) is gone.
Run as ``python -m llm_backend.reaper --watch PID [--watch PID ...] --owner PID``.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys

import psutil

SNAPSHOT_INTERVAL_S = 0.5


def _descendants(owner: psutil.Process) -> dict[int, float]:
    """PID → create time, so a recycled PID is never killed by mistake."""
    found: dict[int, float] = {}
    try:
        for child in owner.children(recursive=True):
            if child.pid == os.getpid():
                continue
            try:
                found[child.pid] = child.create_time()
            except psutil.NoSuchProcess:
                continue
    except psutil.NoSuchProcess:
        pass
    return found


def _kill(processes: dict[int, float]) -> None:
    for pid, created in processes.items():
        try:
            process = psutil.Process(pid)
            if process.create_time() == created:
                process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            continue


def watch(watched: list[int], owner_pid: int) -> int:
    """Block until a watched process exits (kill the owner's descendants) or stdin says stop."""
    owner = psutil.Process(owner_pid)
    pidfds = [os.pidfd_open(pid) for pid in watched]
    known: dict[int, float] = {}
    while True:
        known.update(_descendants(owner))
        known = {pid: created for pid, created in known.items() if psutil.pid_exists(pid)}
        ready, _, _ = select.select([*pidfds, sys.stdin], [], [], SNAPSHOT_INTERVAL_S)
        if sys.stdin in ready:
            line = sys.stdin.readline()
            if line.strip() == "stop":
                return 0
            if line == "":
                # The stub closed our stdin without saying stop: it is dying.
                _kill(known)
                return 1
        if any(fd in ready for fd in pidfds):
            _kill(known)
            try:
                owner.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
            return 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--watch", type=int, action="append", required=True)
    parser.add_argument("--owner", type=int, required=True)
    args = parser.parse_args()
    # Ignore Ctrl-C aimed at the server's process group: the stub's exit is our signal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(watch(args.watch, args.owner))


if __name__ == "__main__":
    main()
