"""Pinning the engine to the GPUs placement chose."""

from __future__ import annotations

import pytest

from llm_backend.devices import engine_device_environment


def _config(**parameters: str) -> dict[str, object]:
    return {"parameters": {key: {"string_value": value} for key, value in parameters.items()}}


@pytest.mark.parametrize(("config", "kind", "device_id", "expected"), [
    (_config(placement_gpus="3"), "GPU", 3,
     {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "3"}),
    (_config(placement_gpus="2,3"), "MODEL", 0,
     {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "2,3"}),
    (_config(placement_gpus="2", placement_simulated="true"), "MODEL", 0, {}),
    (_config(placement_gpus="1", placement_simulated="true"), "GPU", 1, {}),
    (_config(), "CPU", 0, {}),
    (_config(), "MODEL", 0, {}),
    ({}, "MODEL", 0, {}),
])
def test_engine_is_pinned_to_its_placed_gpus(config: dict[str, object], kind: str,
                                             device_id: int, expected: dict[str, str]) -> None:
    assert engine_device_environment(config, kind, device_id) == expected
