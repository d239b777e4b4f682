"""place(): whole decisions over small fleets, placements and refusals."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from control_plane.gpus.readings import GpuHealth
from control_plane.placement.model import (
    Device,
    NodeView,
    Placement,
    Refusal,
    Reservation,
    Strategy,
    Verdict,
)
from control_plane.placement.place import place

from .fleet import GIB, HOLDER, booked, gib, gpu, node, request, uuid


def _placed(result: Placement | Refusal) -> Placement:
    assert isinstance(result, Placement), result
    return result


def _refused(result: Placement | Refusal) -> Refusal:
    assert isinstance(result, Refusal), result
    return result


def test_tensor_parallel_engine_takes_two_gpus_of_one_node() -> None:
    # Node a has one GPU with room; node b has two, GPU 1 and 3 partly booked: best fit takes them.
    fleet = [node("a", [80, 80]), node("b", [80, 80, 80, 80])]
    reservations = [booked("a", 0, 70), booked("b", 1, 30), booked("b", 3, 20)]
    placement = _placed(place(request(30, tp=2), fleet, reservations))
    assert placement.node == "b"
    assert placement.engines == ((1, 3),) and placement.gpus == (1, 3)
    assert placement.tensor_parallel_size == 2
    assert placement.gpu_memory_utilization == 0.375
    assert placement.reservations == (
        Reservation("b", uuid("b", 1), 30 * GIB, HOLDER, active=False),
        Reservation("b", uuid("b", 3), 30 * GIB, HOLDER, active=False))
    # Left after booking: 76 - 30 - 30 on GPU 1, 76 - 20 - 30 on GPU 3.
    assert placement.score == pytest.approx(16 + 26)
    assert placement.passed_over == (
        Verdict(node="a", rule="fits-memory", gpu_index=0, gpu_uuid=uuid("a", 0),
                detail="needs 30.0 GiB, 6.0 GiB bookable: 80.0 GiB total - 4.0 GiB headroom"
                " - 70.0 GiB booked - 0.0 GiB used by others"),
        Verdict(node="a", rule="tensor-parallel", detail="needs 2 GPUs of equal memory (1 engine "
                "x tensor parallelism 2), 1 passed the GPU rules: 1 x 80.0 GiB"))


def test_utilization_is_rounded_up_and_the_booking_is_what_vllm_takes() -> None:
    placement = _placed(place(request(21.4001), [node("a", [80])], []))
    assert placement.gpu_memory_utilization == 0.2676
    assert placement.reservations[0].bytes == math.ceil(80 * GIB * 0.2676)
    assert placement.reservations[0].bytes >= gib(21.4001)


def test_replicas_go_to_distinct_gpus_and_avoid_the_versions_booked_gpus() -> None:
    # Best fit alone would stack all three on GPU 0 (tightest); anti-affinity keeps them apart,
    # and GPU 1 already holds an engine of this version.
    fleet = [node("a", [80, 80, 80, 80, 80])]
    reservations = [booked("a", 0, 50), booked("a", 1, 10, holder=HOLDER, active=True)]
    placement = _placed(place(request(10, replicas=3), fleet, reservations))
    assert placement.engines == ((0,), (2,), (3,))
    assert len({r.gpu_uuid for r in placement.reservations}) == 3
    assert placement.passed_over == (Verdict("a", "anti-affinity",
                                             f"already holds an engine of {HOLDER}", 1, uuid("a", 1)),)


def test_best_fit_and_spread_choose_opposite_gpus() -> None:
    fleet = [node("a", [80, 80]), node("b", [48])]
    reservations = [booked("a", 0, 40), booked("b", 0, 20)]
    best = _placed(place(request(20), fleet, reservations))
    assert (best.node, best.engines) == ("b", ((0,),))
    spread = _placed(place(request(20, strategy=Strategy.SPREAD), fleet, reservations))
    assert (spread.node, spread.engines) == ("a", ((1,),))


def test_best_fit_fills_a_gpu_in_use_before_an_empty_one() -> None:
    # An empty 24 GiB GPU would be left with less (2.8 GiB), but filling the half-used 80 GiB
    # GPU keeps one more GPU empty.
    fleet = [node("a", [80]), node("b", [24])]
    placement = _placed(place(request(20), fleet, [booked("a", 0, 40)]))
    assert (placement.node, placement.engines) == ("a", ((0,),))
    # Memory used outside our bookings (the driver's few hundred MiB on an idle GPU) does not
    # make a GPU "in use": between two empty GPUs the tighter fit wins.
    placement = _placed(place(request(20), [node("a", [80], used=[0.5]), node("b", [24])], []))
    assert placement.node == "b"


def test_empty_gpus_are_opened_on_the_busiest_node() -> None:
    # Node a is empty; node b is full but for GPU 3. An empty GPU of either does equally well,
    # and best fit takes b's so that a stays whole for an engine needing all its GPUs.
    fleet = [node("a", [80] * 4), node("b", [80] * 4)]
    full = [booked("b", i, 70) for i in range(3)]
    placement = _placed(place(request(20), fleet, full))
    assert (placement.node, placement.engines) == ("b", ((3,),))
    assert _placed(place(request(80, tp=4, headroom=0), fleet, full)).node == "a"
    spread = _placed(place(request(20, strategy=Strategy.SPREAD), fleet, full))
    assert spread.node == "a"


def test_equal_choices_go_to_the_first_node_by_name() -> None:
    fleet = [node("c", [80, 80]), node("b", [80, 80]), node("d", [80, 80])]
    assert _placed(place(request(20), fleet, [])).node == "b"


@pytest.mark.parametrize(("fleet", "asked", "verdicts"), [
    ([node("a", [80], error="NVML not found")], request(),
     [Verdict("a", "inventory-readable", "GPU inventory unreadable: NVML not found")]),
    ([node("a", [80]), node("b", [80], error="timed out")], request(nodes=("b",)),
     [Verdict("a", "node-allowed", "the deployment runs only on: b"),
      Verdict("b", "inventory-readable", "GPU inventory unreadable: timed out")]),
    ([node("a", [80])], request(nodes=("z",)),
     [Verdict("z", "inventory-readable", "node 'z' is not in the inventory (known: a); register "
              "it or fix the deployment's node"),
      Verdict("a", "node-allowed", "the deployment runs only on: z")]),
    ([node("a", [80, 80, 80])], request(tp=4),
     [Verdict("a", "tensor-parallel", "needs 4 GPUs of equal memory (1 engine x "
              "tensor parallelism 4), 3 passed the GPU rules: 3 x 80.0 GiB")]),
    ([node("a", [80, 80, 48, 48])], request(tp=4),
     [Verdict("a", "tensor-parallel", "needs 4 GPUs of equal memory (1 engine x "
              "tensor parallelism 4), 4 passed the GPU rules: 2 x 80.0 GiB, 2 x 48.0 GiB")]),
    ([], request(), [Verdict("", "inventory-readable",
                             "the inventory holds no nodes; register a node first")]),
], ids=["unreadable", "not-allowed", "unknown-node", "too-few-gpus", "unequal-gpus", "no-nodes"])
def test_node_level_refusals(fleet: list[NodeView], asked: object,
                             verdicts: list[Verdict]) -> None:
    refusal = _refused(place(asked, fleet, []))  # type: ignore[arg-type]
    assert list(refusal.verdicts) == verdicts
    assert all(v.gpu_index is None for v in refusal.verdicts)


def test_refusal_lists_every_gpu_and_node_with_the_first_rule_it_failed() -> None:
    fleet = [node("a", [80, 80, 80, 80], used=[0, 0, 70, 0], excluded=(0,)),
             node("b", [80], error="metrics endpoint did not answer")]
    lost = replace(fleet[0].gpus[3], health=GpuHealth.LOST, memory_used_bytes=None,
                   detail="GPU_IS_LOST")
    fleet[0] = replace(fleet[0], gpus=(*fleet[0].gpus[:3], lost))
    refusal = _refused(place(request(20, tp=2), fleet, [booked("a", 1, 10, holder=HOLDER)]))
    assert [(v.node, v.gpu_index, v.rule) for v in refusal.verdicts] == [
        ("a", 0, "gpu-not-excluded"), ("a", 1, "anti-affinity"), ("a", 2, "fits-memory"),
        ("a", 3, "gpu-healthy"), ("a", None, "tensor-parallel"), ("b", None, "inventory-readable")]
    assert refusal.verdicts[2].detail == (
        "needs 20.0 GiB, 6.0 GiB bookable: 80.0 GiB total - 4.0 GiB headroom - 0.0 GiB booked"
        " - 70.0 GiB used by others")
    assert refusal.summary == (
        "no node can hold 1 engine of 20.0 GiB per GPU with tensor parallelism 2: refused by "
        "gpu-not-excluded (1 GPU), anti-affinity (1 GPU), fits-memory (1 GPU), gpu-healthy (1 GPU),"
        " tensor-parallel (1 node), inventory-readable (1 node)")
    assert refusal.as_dict()["verdicts"][0] == {
        "node": "a", "gpu_index": 0, "gpu_uuid": uuid("a", 0), "rule": "gpu-not-excluded",
        "detail": "excluded by an operator (GPU-a-0); include it again to place new engines on it"}


def test_excluded_gpu_is_passed_over() -> None:
    placement = _placed(place(request(20), [node("a", [80, 80], excluded=(0,))],
                              [booked("a", 0, 40)]))
    assert placement.engines == ((1,),)
    assert [(v.gpu_index, v.rule) for v in placement.passed_over] == [(0, "gpu-not-excluded")]


def test_memory_used_by_others_is_counted() -> None:
    # GPU 0 looks empty by our books but 60 GiB are in use by something else.
    fleet = [node("a", [80, 80], used=[60, 0])]
    placement = _placed(place(request(20), fleet, []))
    assert placement.engines == ((1,),)
    assert placement.passed_over[0].detail.endswith("60.0 GiB used by others")
    assert isinstance(place(request(20), [node("a", [80], used=[60])], []), Refusal)


def test_booked_engine_not_yet_loaded_is_counted() -> None:
    # Nothing shows in "used" yet, but 60 GiB are promised to an engine that is loading.
    fleet = [node("a", [80])]
    refusal = _refused(place(request(20), fleet, [booked("a", 0, 60, active=False)]))
    assert refusal.verdicts[0].rule == "fits-memory"
    assert "60.0 GiB booked" in refusal.verdicts[0].detail
    assert isinstance(place(request(16), fleet, [booked("a", 0, 60)]), Placement)


def test_loaded_engine_is_not_counted_twice() -> None:
    fleet = [node("a", [80], used=[60])]
    assert isinstance(place(request(16), fleet, [booked("a", 0, 60, active=True)]), Placement)


def test_reservations_on_other_nodes_gpus_do_not_count() -> None:
    # Same index on another node, and a UUID no node has: neither touches node a's GPU 0.
    fleet = [node("a", [80])]
    reservations = [booked("b", 0, 70), Reservation("a", "GPU-gone", 70 * GIB, "x")]
    assert isinstance(place(request(70), fleet, reservations), Placement)


@pytest.mark.parametrize(("nodes", "expected"), [
    (None, "a"),
    (("c", "b"), "c"),
    (("z", "b"), "b"),
], ids=["by-name", "request-order", "skips-unknown"])
def test_cpu_engine_goes_to_the_first_allowed_node(nodes: tuple[str, ...] | None,
                                                   expected: str) -> None:
    # The CPU needs no GPU inventory: a node whose GPUs cannot be read still runs CPU engines.
    fleet = [node("c", []), node("b", [], error="no NVML"), node("a", [80], used=[80])]
    placement = _placed(place(request(device=Device.CPU, replicas=2, nodes=nodes), fleet,
                              [booked("a", 0, 80)]))
    assert placement.node == expected
    assert placement.device is Device.CPU
    assert placement.engines == ((), ())
    assert placement.gpu_memory_utilization is None
    assert placement.reservations == ()


def test_cpu_engine_refused_when_no_node_is_allowed() -> None:
    refusal = _refused(place(request(device=Device.CPU, nodes=("z",)), [node("a", [])], []))
    assert [(v.node, v.rule) for v in refusal.verdicts] == [("z", "inventory-readable"),
                                                            ("a", "node-allowed")]
    assert refusal.summary == ("no node can run 1 engine on the CPU: refused by "
                               "inventory-readable (1 node), node-allowed (1 node)")
    assert _refused(place(request(device=Device.CPU), [], [])).verdicts[0].rule == \
        "inventory-readable"


@pytest.mark.parametrize(("change", "message"), [
    ({"tensor_parallel_size": 0}, "tensor_parallel_size must be at least 1, got 0"),
    ({"replicas": 0}, "replicas must be at least 1, got 0"),
    ({"bytes_per_gpu": 0}, "bytes_per_gpu must be positive for a GPU engine, got 0"),
    ({"headroom_fraction": 1.0}, "headroom_fraction must be in [0, 1), got 1.0"),
])
def test_malformed_requests_raise(change: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        place(replace(request(), **change), [node("a", [80])], [])  # type: ignore[arg-type]
    assert str(raised.value) == message


def test_unreadable_gpu_beside_healthy_ones() -> None:
    reading = replace(gpu(0), memory_total_bytes=None)
    fleet = [NodeView("a", gpus=(reading, gpu(1, node="a")))]
    placement = _placed(place(request(20), fleet, []))
    assert placement.engines == ((1,),)
    assert placement.passed_over[0].rule == "gpu-healthy"


def test_a_small_engine_opens_the_largest_empty_gpu_a_large_one_the_tightest() -> None:
    # 10 GiB would leave 12.8 GiB of a 24 GiB GPU that little else fits; on a 141 GiB GPU the
    # room takes the next engines. 20 GiB fills the 24 GiB GPU: it takes that one.
    fleet = [node("a", [24]), node("b", [141]), node("c", [80])]
    assert _placed(place(request(10), fleet, [])).node == "b"
    assert _placed(place(request(20), fleet, [])).node == "a"
    # Once b runs something, it is filled before any empty GPU is opened.
    assert _placed(place(request(20), fleet, [booked("b", 0, 10)])).node == "b"
