"""Fair share inside a priority level, against the real engine: with tenant A's backlog filling
level 3's queue, tenant B's requests at the same level start ahead of most of it (first come,
first served would start them after all of it). Tenants are trusted with the gateway's secret,
as the gateway sends them."""

from __future__ import annotations

from tests.integration.support import GATEWAY_SECRET, GrpcStream, metric, wait_until

FLOOD = 10
# Long enough that A's first two are still running when B's requests arrive.
SAMPLING = {"max_tokens": 48, "ignore_eos": True, "temperature": 0}


def test_a_second_tenant_is_not_stuck_behind_the_first_ones_backlog(served):
    def send(tenant: str) -> GrpcStream:
        stream = GrpcStream(served)
        stream.submit("Count slowly:", SAMPLING,
                      parameters={"tenant": tenant, "gateway_secret": GATEWAY_SECRET})
        return stream

    assert wait_until(lambda: metric(served, "llm_inflight_requests") == 0, 120)
    streams_a = [send("fair-a") for _ in range(FLOOD)]
    # A's requests fill the two shared slots; the rest of its backlog waits in level 3.
    assert wait_until(lambda: metric(served, "llm_waiting_requests", priority="3")
                      == FLOOD - 2, 60)
    streams_b = [send("fair-b") for _ in range(2)]
    try:
        results_a = [stream.wait(timeout=300) for stream in streams_a]
        results_b = [stream.wait(timeout=300) for stream in streams_b]
    finally:
        for stream in (*streams_a, *streams_b):
            stream.close(cancel=stream.result.done_at is None)
    for result in (*results_a, *results_b):
        assert result.error is None and result.first_token_at is not None, result
    b_started = max(result.first_token_at for result in results_b)
    a_after_b = sum(result.first_token_at > b_started for result in results_a)
    print(f"[fair share] {a_after_b} of A's {FLOOD} requests started after both of B's")
    # Both of B's started while at least half of A's backlog still waited; FIFO: none would.
    assert a_after_b >= FLOOD // 2, (a_after_b, sorted(
        (round(r.first_token_at - b_started, 2), who) for who, rs in
        (("a", results_a), ("b", results_b)) for r in rs))
