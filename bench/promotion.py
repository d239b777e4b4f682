"""A full promotion (manifest → served) through the control plane, under streaming load, against
a real tritonserver and real vLLM.

A control plane serves in its own process (``llm-control-plane serve`` on a fresh SQLite database,
reconciling every second) and drives one tritonserver node with an empty repository. A first
promotion (not measured) puts version 1 on ``production`` and warms the control plane's one-off
work (importing vLLM to check architectures and engine arguments). Then, while clients stream
completions back to back from ``production``, three promotions run from manifests: two that pass
their gates (smoke and comparison) and one whose smoke gate fails (it must stop before the swap).

For each: the wall time of every step, the time Triton spent loading inside it (its log: from
``loading: <name>`` to the outcome, for the candidate and the served name, intervals merged), the
time of the gate steps (the gate prompts, sent one after another), and ``control_plane_share`` = what is left of
the wall time, over the wall time (goal ≤ 0.05). ``failed_requests`` counts the streaming
clients' failures across all three (goal 0).

    make bench-promotion        (or: .venv/bin/python -m bench.promotion --clients 2)
"""

from __future__ import annotations

import argparse
import re
import secrets
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import print_table, write_results
from bench.lifecycle import (
    ENGINE_ARGS,
    KEY_VARIABLE,
    MODEL,
    MODEL_SOURCE,
    NODE,
    StreamingLoad,
    control_plane,
)
from control_plane.triton.runtime import CACHE_DIR
from control_plane.triton.server import TritonServer

PROMPT = "The capital of France is"
SMOKE = {"prompt": PROMPT, "max_tokens": 8, "expect": {"non_empty": True}}
COMPARE = {"prompts": [PROMPT, "Water boils at"], "max_tokens": 8, "min_identical_share": 0.5}
FAILING = {"prompt": PROMPT, "max_tokens": 8, "expect": {"contains": ["ZZZ-never"]}}
TIMEOUT_S = 1200.0
_LIFECYCLE = re.compile(r'^[IE](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) +\d+ '
                        r'model_lifecycle\.cc:\d+\] "(.*)"$')


def manifest(**gates: Any) -> dict[str, Any]:
    return {"source": str(MODEL_SOURCE), "engine_args": ENGINE_ARGS, "gates": gates}


def promote(api: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    started = api.post(f"/api/v1/models/{MODEL}/promotions", json=body)
    if started.status_code != 202:
        raise RuntimeError(f"promotion refused: {started.status_code} {started.text[:500]}")
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        promotion: dict[str, Any] = api.get(started.headers["Location"]).json()
        if promotion["state"] in ("succeeded", "failed"):
            return promotion
        time.sleep(0.2)
    raise RuntimeError(f"promotion {started.headers['Location']} did not end in {TIMEOUT_S:g} s")


def _instant(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def triton_load_intervals(log_path: Path, names: set[str], start: float, end: float
                          ) -> list[tuple[float, float]]:
    """Each load of one of ``names`` between ``start`` and ``end`` (wall clock), from Triton's
    log: ``loading: <name>:<v>`` to ``successfully loaded`` / ``failed to load``."""
    year = time.localtime().tm_year
    opened: dict[str, float] = {}
    intervals = []
    for line in log_path.read_text(errors="replace").splitlines():
        match = _LIFECYCLE.match(line)
        if match is None:
            continue
        month, day, hour, minute, second, micro = map(int, match.groups()[:6])
        at = datetime(year, month, day, hour, minute, second, micro).timestamp()
        message = match.group(7)
        if not start - 1 <= at <= end + 1:
            continue
        if message.startswith("loading: "):
            name = message[len("loading: "):].rsplit(":", 1)[0]
            if name in names:
                opened[name] = at
        else:
            done = re.match(r"^(?:successfully loaded|failed to load) '([^']+)'", message)
            if done and done.group(1) in opened:
                intervals.append((opened.pop(done.group(1)), at))
    return intervals


def merged_seconds(intervals: list[tuple[float, float]]) -> float:
    total, current = 0.0, None
    for begin, end in sorted(intervals):
        if current is None or begin > current[1]:
            if current is not None:
                total += current[1] - current[0]
            current = [begin, end]
        else:
            current[1] = max(current[1], end)
    return total + (current[1] - current[0] if current else 0.0)


def measure(promotion: dict[str, Any], log_path: Path) -> dict[str, Any]:
    steps = {s["name"]: s for s in promotion["steps"]}
    started = [_instant(s["started_at"]) for s in steps.values() if s.get("started_at")]
    ended = [_instant(s["finished_at"]) for s in steps.values() if s.get("finished_at")]
    start, end = min(started), max(ended)
    # The candidate's Triton name: <model>.candidate-<first 12 of the promotion id>.
    names = {MODEL, f"{MODEL}.candidate-{promotion['id'][:12]}"}
    loads = merged_seconds(triton_load_intervals(log_path, names, start, end))
    # The gate steps are the gate prompts, one after another (plus a few reads of the database).
    gates = sum(_instant(steps[name]["finished_at"]) - _instant(steps[name]["started_at"])
                for name in ("gates_candidate", "gates_served")
                if steps[name].get("started_at") and steps[name].get("finished_at"))
    wall = end - start
    return {
        "version": promotion["version"], "state": promotion["state"],
        "failed_step": promotion["failed_step"], "wall_s": round(wall, 2),
        "steps_s": {name: round(_instant(s["finished_at"]) - _instant(s["started_at"]), 2)
                    for name, s in steps.items()
                    if s.get("started_at") and s.get("finished_at")},
        "triton_load_s": round(loads, 2), "gate_prompts_s": round(gates, 2),
        "control_plane_s": round(wall - loads - gates, 2),
        "control_plane_share": round((wall - loads - gates) / wall, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=2, help="streaming clients during the runs")
    args = parser.parse_args()

    key = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="bench-promotion-") as workdir:
        log_path = CACHE_DIR / "logs" / "bench-promotion-tritonserver.log"
        node = TritonServer(Path(workdir) / "repository", repository_key=key, log_path=log_path)
        (Path(workdir) / "repository").mkdir()
        node.start()
        try:
            with control_plane(Path(workdir), key) as api:
                api.post("/api/v1/nodes", json={
                    "name": NODE, "http_url": f"http://{node.http_url}",
                    "grpc_url": node.grpc_url, "api_key_ref": f"env:{KEY_VARIABLE}"}
                ).raise_for_status()
                api.post("/api/v1/models", json={"name": MODEL}).raise_for_status()
                warm = promote(api, {"manifest": manifest(smoke=[SMOKE]), "to": "production",
                                     "nodes": [NODE]})
                if warm["state"] != "succeeded":
                    raise RuntimeError(f"the first promotion failed: {warm['error']}")
                print(f"version {warm['version']} serves production; measuring", flush=True)
                runs = []
                with StreamingLoad(node.grpc_url, args.clients) as load:
                    time.sleep(2)
                    for gates in ({"smoke": [SMOKE], "compare": COMPARE},
                                  {"smoke": [SMOKE, FAILING]},
                                  {"smoke": [SMOKE], "compare": COMPARE}):
                        promotion = promote(api, {"manifest": manifest(**gates),
                                                  "to": "production"})
                        runs.append(measure(promotion, log_path))
                        print(f"  version {promotion['version']}: {promotion['state']} "
                              f"({runs[-1]['wall_s']:.1f} s)", flush=True)
                    time.sleep(2)
                completed, failed = load.counts()
        finally:
            node.stop()

    print_table("Promotions under streaming load (manifest → served)",
                ["version", "state", "failed step", "wall s", "triton loads s", "gates s",
                 "control plane s", "share"],
                [[r["version"], r["state"], r["failed_step"] or "-", r["wall_s"],
                  r["triton_load_s"], r["gate_prompts_s"], r["control_plane_s"],
                  r["control_plane_share"]] for r in runs])
    print_table("Steps (s)", ["version", *runs[0]["steps_s"].keys()],
                [[r["version"], *(r["steps_s"].get(k, "-") for k in runs[0]["steps_s"])]
                 for r in runs])
    share = max(r["control_plane_share"] for r in runs)
    print(f"\ncontrol_plane_share (worst of 3): {share:.3f} (goal <= 0.05)")
    print(f"failed_requests: {failed} of {completed + failed} (goal 0)")
    path = write_results("promotion", {
        "runs": runs, "control_plane_share": share, "failed_requests": failed,
        "completed_requests": completed, "streaming_clients": args.clients,
        "goals": {"control_plane_share": "<= 0.05", "failed_requests": 0}})
    print(f"results: {path}")


if __name__ == "__main__":
    main()
