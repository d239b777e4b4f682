"""Routing that outlives what fails around it: the control plane stopped (the last table keeps
serving), an alias swapped under load (no request fails), a node killed under streaming load (new
requests go to the other node, no stream hangs, the node rejoins by itself). Named to run after
the other gateway modules, as it swaps the version and restarts a node of the shared stack."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx

from tests.control_plane.deployments.support import ENGINE_ARGS, finished, register
from tests.integration.gateway.conftest import MODEL, Load, Stack, healthz, node_serves
from tests.integration.support import metric, wait_until

PROMPT = "The capital of France is"


def generate(stack: Stack, max_tokens: int = 4) -> httpx.Response:
    return httpx.post(f"{stack.http}/v2/models/{MODEL}/generate", headers=stack.bearer(),
                      json={"text_input": PROMPT, "parameters": {"max_tokens": max_tokens}},
                      timeout=120)


# A pause between one client's requests: steady traffic that still leaves the 2-core machine the
# CPU to load the new engines beside the serving ones.
LOAD_PAUSE_S = 0.2
SWAP_TIMEOUT_S = 900


def test_gateway_keeps_routing_with_the_control_plane_stopped(stack: Stack) -> None:
    stack.control_plane.stop()
    try:
        assert wait_until(
            lambda: healthz(stack)["routing"]["control_plane"] == "unreachable", 30)  # type: ignore[index]
        routing = healthz(stack)["routing"]
        assert routing["serving_last_known_table"] is True  # type: ignore[index]
        for _ in range(4):
            assert generate(stack).status_code == 200
        metrics = httpx.get(f"{stack.http}/metrics", timeout=10).text
        assert "llmgw_control_plane_reachable 0.0" in metrics
    finally:
        stack.admin = stack.control_plane.start()
    assert wait_until(
        lambda: healthz(stack)["routing"]["control_plane"] == "reachable", 60)  # type: ignore[index]


def test_an_alias_swap_through_the_gateway_fails_no_request(stack: Stack) -> None:
    # Another engine setting, so each node really loads a second engine beside the first.
    version = register(stack.admin, {}, {**ENGINE_ARGS, "max_num_seqs": 4}, model=MODEL)
    with Load(stack, pause_s=LOAD_PAUSE_S) as load:
        time.sleep(2)
        swap = stack.admin.put(f"/api/v1/models/{MODEL}/aliases/production",
                               json={"version": version})
        operation = finished(stack.admin, {}, swap, timeout=SWAP_TIMEOUT_S)
        time.sleep(2)
    assert operation["status"] == "succeeded", operation
    assert load.failures == [], load.failures[:5]
    assert load.ok > 10
    print(f"[gateway] swap under load: {load.ok} requests, 0 failed")
    table = stack.admin.get("/api/v1/routing").json()
    assert [m["version"] for m in table["models"] if m["name"] == MODEL] == [version]
    stack.version = version


def _stream(stack: Stack, outcomes: list[dict[str, Any]], answering: list[int]) -> None:
    started = time.monotonic()
    text, error = "", None
    try:
        with httpx.stream("POST", f"{stack.http}/v2/models/{MODEL}/generate_stream",
                          headers=stack.bearer(), timeout=httpx.Timeout(10, read=120),
                          json={"text_input": PROMPT, "stream": True,
                                "parameters": {"max_tokens": 120, "ignore_eos": True}}) as answer:
            for line in answer.iter_lines():
                if line.startswith("data: "):
                    event = json.loads(line[6:])
                    if "error" in event:
                        error = event["error"]
                    else:
                        if not text:
                            answering.append(1)
                        text += event["text_output"]
    except httpx.HTTPError as exc:
        error = f"transport: {exc}"
    outcomes.append({"text": text, "error": error, "seconds": time.monotonic() - started})


def test_a_node_killed_under_streaming_load(stack: Stack) -> None:
    assert wait_until(lambda: node_serves(stack, "gw-a") and node_serves(stack, "gw-b"), 60)
    outcomes: list[dict[str, Any]] = []
    answering: list[int] = []
    streams = [threading.Thread(target=_stream, args=(stack, outcomes, answering))
               for _ in range(6)]
    for thread in streams:
        thread.start()
    # Load-aware routing spreads the six streams over both nodes; kill one once every stream has
    # its first token (before it, a failed request is retried on the other node instead).
    assert wait_until(lambda: len(answering) == 6, 120)
    # The victim is a node that holds streams: which one does depends on the load each reported
    # when the streams arrived (CI once put all six on one node), not on its name.
    inflight = {name: metric(node, "llm_inflight_requests", model=MODEL)
                for name, node in stack.nodes.items()}
    assert 0 < sum(inflight.values()) <= 6, inflight
    victim_name = max(inflight, key=lambda name: inflight[name])
    survivor_name = next(name for name in inflight if name != victim_name)
    victim, survivor = stack.nodes[victim_name], stack.nodes[survivor_name]
    victim.kill()
    killed = time.monotonic()
    for thread in streams:
        thread.join(timeout=180)
    assert not any(thread.is_alive() for thread in streams), "a stream hung"
    cut = [o for o in outcomes if o["error"]]
    whole = [o for o in outcomes if not o["error"]]
    # Every stream the victim held ends with an error; those on the survivor finish whole.
    assert cut, outcomes
    assert len(whole) >= 6 - inflight[victim_name], (inflight, outcomes)
    assert all("failed mid-stream" in o["error"] for o in cut), cut
    assert all(o["seconds"] < 150 for o in outcomes)
    print(f"[gateway] node killed: {len(cut)} streams ended with an error, {len(whole)} finished")

    # New requests go to the survivor (a first try at the dead node is retried there).
    for _ in range(6):
        assert generate(stack).status_code == 200
    assert not node_serves(stack, victim_name)
    served_before = metric(survivor, "nv_inference_request_success", model=MODEL)
    assert served_before >= 6

    # The node comes back on its ports, empty; nobody calls an API: the reconciler reloads the
    # model there and the gateway's probe brings it back into rotation.
    victim.start()

    def victim_state() -> str:
        found = stack.admin.get("/api/v1/deployments", params={"model": MODEL}).json()["items"]
        return next((d["state"] for d in found if d["node"] == victim_name
                     and d["alias"] == "production"), "absent")

    # The reconciler reloads it (a minute or more on a loaded 2-core machine), then the gateway's
    # probe (at most its 30 s longest ejection later) puts it back in rotation.
    assert wait_until(lambda: victim_state() == "READY", 600, interval=1), victim_state()
    assert wait_until(lambda: node_serves(stack, victim_name), 120, interval=1), healthz(stack)
    print(f"[gateway] killed node back in rotation {time.monotonic() - killed:.0f} s after kill")

    def victim_served() -> bool:
        # Two at once: the least-loaded choice sends the second to the node without the first,
        # so a node in rotation gets one whatever the tie-breaks.
        answers: list[int] = []
        pair = [threading.Thread(target=lambda: answers.append(generate(stack).status_code))
                for _ in range(2)]
        for thread in pair:
            thread.start()
        for thread in pair:
            thread.join(timeout=180)
        assert answers == [200, 200], answers
        return metric(victim, "nv_inference_request_success", model=MODEL) > 0

    assert wait_until(victim_served, 180, interval=0.5), (victim_state(), healthz(stack))
