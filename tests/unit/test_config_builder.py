"""A version's Triton config: built through protobuf ModelConfig, checked as the backend checks it."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from control_plane.errors import InvalidTritonConfig
from control_plane.registry.serving import QueuePolicy, ServingSettings
from control_plane.triton import config_builder, model_config
from control_plane.triton.runtime import PROJECT_ROOT

SHIPPED = PROJECT_ROOT / "model_repository" / "smollm2" / "config.pbtxt"


def test_default_settings_build_exactly_the_shipped_config() -> None:
    # The shipped config.pbtxt and the builder must not drift apart: the defaults are the shipped
    # model's settings, so building with them reproduces the file field for field.
    shipped = model_config.read_pbtxt(SHIPPED)
    shipped.name = "smollm2"
    assert config_builder.build("smollm2", ServingSettings(), {}) == shipped


def test_serving_settings_become_dynamic_batching_and_parameters() -> None:
    serving = ServingSettings(
        priority_levels=2, default_queue_policy=QueuePolicy(max_queue_size=5),
        priority_queue_policies={1: QueuePolicy(default_timeout_microseconds=1_000_000)},
        max_inflight_requests=6, reserved_urgent_slots=2, drain_timeout_seconds=2.5)
    config = config_builder.to_json_dict(config_builder.build("m", serving, {}))
    batching = config["dynamic_batching"]
    assert (batching["priority_levels"], batching["default_priority_level"]) == ("2", "2")
    assert batching["default_queue_policy"]["max_queue_size"] == 5
    assert batching["priority_queue_policy"]["1"]["default_timeout_microseconds"] == "1000000"
    assert {key: value["string_value"] for key, value in config["parameters"].items()} == {
        "max_inflight_requests": "6", "reserved_urgent_slots": "2",
        "urgent_priority_level": "1", "drain_timeout_seconds": "2.5"}


def test_overrides_merge_into_the_built_config() -> None:
    overrides = {"parameters": {"batcher_wakeup": {"string_value": "false"}},
                 "dynamic_batching": {"max_queue_delay_microseconds": 100},
                 "version_policy": {"latest": {"num_versions": 1}}}
    config = config_builder.to_json_dict(config_builder.build("m", ServingSettings(), overrides))
    assert config["parameters"]["batcher_wakeup"] == {"string_value": "false"}
    assert config["parameters"]["reserved_urgent_slots"] == {"string_value": "1"}
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == "100"
    assert config["dynamic_batching"]["priority_levels"] == "3"
    assert config["version_policy"] == {"latest": {"num_versions": 1}}


@pytest.mark.parametrize("overrides,message", [
    ({"input": []}, "'input' cannot be overridden: the tensor interface is fixed"),
    ({"backend": "python"}, "'backend' cannot be overridden: the backend is always llm_vllm"),
    ({"instance_group": [{"kind": "KIND_GPU"}]},
     "'instance_group' cannot be overridden: placement assigns instance groups"),
    ({"dynamic_batching": {"priority_levels": 5}},
     "'dynamic_batching.priority_levels' is set through serving.priority_levels"),
    ({"parameters": {"reserved_urgent_slots": {"string_value": "0"}}},
     "'parameters.reserved_urgent_slots' is set through serving.reserved_urgent_slots"),
    ({"dynamic_batching": {"preferred_batch_size": [4]}},
     "'dynamic_batching.preferred_batch_size' needs a max_batch_size"),
    ({"response_cache": {"enable": True}},
     "Triton does not cache the responses of a decoupled (streaming) model"),
    ({"max_batch_sise": 4}, "has no field named \"max_batch_sise\""),
    ({"max_batch_sise": 4}, "did you mean 'max_batch_size'?"),
    ({"dynamic_batching": {"max_queue_delay_microseconds": "soon"}},
     "not a valid Triton ModelConfig"),
])
def test_overrides_that_cannot_apply_are_refused_by_name(overrides: dict, message: str) -> None:
    with pytest.raises(InvalidTritonConfig) as refused:
        config_builder.check("m", ServingSettings(), overrides, {}, "/models/m")
    assert message in refused.value.message


def test_the_backends_own_load_check_runs_at_registration() -> None:
    bad_flag = {"parameters": {"back_pressure": {"string_value": "maybe"}}}
    with pytest.raises(InvalidTritonConfig, match="parameters.back_pressure: expected true or "
                                                  "false, got 'maybe'"):
        config_builder.check("m", ServingSettings(), bad_flag, {}, "/models/m")
    with pytest.raises(InvalidTritonConfig, match="priority_passthrough needs"):
        config_builder.check("m", ServingSettings(), {}, {"scheduling_policy": "fcfs"},
                             "/models/m")
    fcfs = {"parameters": {"priority_passthrough": {"string_value": "false"}}}
    config_builder.check("m", ServingSettings(), fcfs, {"scheduling_policy": "fcfs"}, "/models/m")


def test_reserved_slots_must_leave_room_in_the_engine() -> None:
    with pytest.raises(InvalidTritonConfig, match="reserved_urgent_slots 4 leaves none of the 4"):
        config_builder.check("m", ServingSettings(reserved_urgent_slots=4), {},
                             {"max_num_seqs": 4}, "/models/m")
    config_builder.check("m", ServingSettings(reserved_urgent_slots=3), {},
                         {"max_num_seqs": 4}, "/models/m")


@pytest.mark.parametrize("fields,message", [
    ({"priority_levels": 2, "default_priority_level": 3},
     "default_priority_level 3 is not one of the 2 levels"),
    ({"priority_levels": 1, "urgent_priority_level": 1},
     "priority_queue_policies names level(s) [2] beyond priority_levels 1"),
    ({"priority_levels": 1, "priority_queue_policies": {}, "urgent_priority_level": 2},
     "urgent_priority_level 2 is not one of the 1 levels"),
    ({"max_inflight_requests": 1}, "reserved_urgent_slots 1 leaves none of the 1 in-flight"),
    ({"priority_levels": 17}, "less than or equal to 16"),
    ({"default_queue_policy": {"timeout_action": "DELAY"}}, "'REJECT'"),
    ({"drain_timeout": 3}, "Extra inputs are not permitted"),
])
def test_inconsistent_serving_settings_are_refused(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        ServingSettings.model_validate(fields)
