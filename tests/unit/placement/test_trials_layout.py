"""The placement trials' table of where the GPUs go (``bench.placement_trials.by_kind``): per GPU
kind, what a layout books and leaves, counted from its reservations."""

from __future__ import annotations

import pytest

from bench.placement_stream import HEADROOM, NODE_KINDS, Fleet, make_versions
from bench.placement_trials import GIB, by_kind
from control_plane.placement.accounting import usable_bytes
from control_plane.placement.model import Reservation

TOTALS = {kind: total for kind, total, _ in NODE_KINDS}


def test_a_layout_is_summed_per_kind_with_its_room_and_its_multi_gpu_engines() -> None:
    fleet = Fleet.build()
    versions, _ = make_versions(3, 0.8, sum(TOTALS.values()))
    single, pair, small = versions
    placed = [
        ((Reservation("h200-000", "GPU-h200-000-0", 100 * GIB, "a"),), single),
        ((Reservation("h100-003", "GPU-h100-003-0", 30 * GIB, "b"),
          Reservation("h100-003", "GPU-h100-003-1", 30 * GIB, "b")), pair),
        # A second engine on a GPU in use: booked beside the first, not a GPU more.
        ((Reservation("h100-003", "GPU-h100-003-1", 40 * GIB, "c"),), small),
    ]
    kinds = by_kind(placed, fleet)

    assert set(kinds) == {"h100", "h200"}
    h200, h100 = usable_bytes(TOTALS["h200"], HEADROOM), usable_bytes(TOTALS["h100"], HEADROOM)
    assert kinds["h200"]["gpus_in_use"] == 1
    assert kinds["h200"]["booked_of_usable"] == pytest.approx(100 * GIB / h200)
    assert kinds["h200"]["room_left_gib"] == pytest.approx((h200 - 100 * GIB) / GIB)
    assert kinds["h200"]["engines_of_versions_on_several_gpus"] == 0
    assert kinds["h100"]["gpus_in_use"] == 2
    assert kinds["h100"]["booked_of_usable"] == pytest.approx(100 * GIB / (2 * h100))
    # GPU 0 has about 46 GiB left, GPU 1 about 6: only the first counts as room of 10 GiB or more.
    assert kinds["h100"]["room_left_gib"] == pytest.approx((2 * h100 - 100 * GIB) / GIB)
    assert kinds["h100"]["room_left_on_gpus_with_10_gib_or_more_gib"] == pytest.approx(
        (h100 - 30 * GIB) / GIB)
    assert kinds["h100"]["engines_of_versions_on_several_gpus"] == 2


def test_an_empty_layout_has_no_kinds() -> None:
    assert by_kind([], Fleet.build()) == {}
