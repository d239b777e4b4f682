"""A version's Triton config: built through protobuf ModelConfig, checked as the backend checks it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pydantic import ValidationError
from tritonclient.grpc import model_config_pb2

from control_plane.errors import InvalidTritonConfig
from control_plane.registry.serving import QueuePolicy, ServingSettings
from control_plane.triton import config_builder, model_config
from control_plane.triton.runtime import PROJECT_ROOT
from llm_backend.scheduler import QueuePolicy as BackendQueuePolicy
from llm_backend.settings import settings_from

SHIPPED = PROJECT_ROOT / "model_repository" / "smollm2" / "config.pbtxt"


def _policies_decoded(config: model_config_pb2.ModelConfig) -> dict[str, Any]:
    # A queue policy is JSON inside a parameter: the file may space it for reading, and may leave
    # out timeout_action, whose default REJECT is the only action the backend takes.
    decoded = config_builder.to_json_dict(config)
    for key, value in decoded["parameters"].items():
        if key == "default_queue_policy" or key.startswith("priority_queue_policy."):
            value["string_value"] = {"timeout_action": "REJECT",
                                     **json.loads(value["string_value"])}
    return decoded


def test_default_settings_build_exactly_the_shipped_config() -> None:
    # The shipped config.pbtxt and the builder must not drift apart: the defaults are the shipped
    # model's settings, so building with them reproduces the file field for field.
    shipped = model_config.read_pbtxt(SHIPPED)
    shipped.name = "smollm2"
    built = config_builder.build("smollm2", ServingSettings(), {})
    assert _policies_decoded(built) == _policies_decoded(shipped)


def test_serving_settings_become_parameters_and_dynamic_batching_stays_empty() -> None:
    serving = ServingSettings(
        priority_levels=2, default_queue_policy=QueuePolicy(max_queue_size=5),
        priority_queue_policies={1: QueuePolicy(default_timeout_microseconds=1_000_000)},
        max_inflight_requests=6, reserved_urgent_slots=2, drain_timeout_seconds=2.5)
    config = config_builder.to_json_dict(config_builder.build("m", serving, {}))
    # Nothing in dynamic_batching that turns Triton's payload prefetching off.
    assert config["dynamic_batching"] == {}
    assert {key: value["string_value"] for key, value in config["parameters"].items()} == {
        "priority_levels": "2", "default_priority_level": "2",
        "default_queue_policy": '{"timeout_action":"REJECT","default_timeout_microseconds":0,'
                                '"allow_timeout_override":true,"max_queue_size":5}',
        "priority_queue_policy.1": '{"timeout_action":"REJECT","default_timeout_microseconds":'
                                   '1000000,"allow_timeout_override":true,"max_queue_size":0}',
        "max_inflight_requests": "6", "reserved_urgent_slots": "2",
        "urgent_priority_level": "1", "drain_timeout_seconds": "2.5",
        "REPORT_CUSTOM_METRICS": "true", "fair_share_preemption": "true"}


def test_the_default_settings_write_one_policy_per_level_that_has_one() -> None:
    config = config_builder.to_json_dict(config_builder.build("m", ServingSettings(), {}))
    parameters = {key: value.get("string_value") for key, value in config["parameters"].items()}
    assert (parameters["priority_levels"], parameters["default_priority_level"]) == ("3", "3")
    assert json.loads(parameters["default_queue_policy"]) == {
        "timeout_action": "REJECT", "default_timeout_microseconds": 120_000_000,
        "allow_timeout_override": True, "max_queue_size": 256}
    assert sorted(key for key in parameters if key.startswith("priority_queue_policy.")) == [
        "priority_queue_policy.1", "priority_queue_policy.2"]
    assert json.loads(parameters["priority_queue_policy.2"])["max_queue_size"] == 64


def test_the_backend_reads_back_the_levels_and_policies_the_builder_writes() -> None:
    serving = ServingSettings(
        priority_levels=4, default_priority_level=2, urgent_priority_level=2,
        default_queue_policy=QueuePolicy(default_timeout_microseconds=5_000_000,
                                         allow_timeout_override=False, max_queue_size=7),
        priority_queue_policies={3: QueuePolicy(max_queue_size=1)})
    config = config_builder.to_json_dict(config_builder.build("m", serving, {}))
    settings = settings_from(config, {"model": "/models/m"})
    assert (settings.levels.count, settings.levels.default) == (4, 2)
    assert settings.urgent_level == 2
    default = BackendQueuePolicy(max_queue_size=7, default_timeout_s=5.0,
                                 allow_timeout_override=False)
    assert settings.queue_policies == {
        1: default, 2: default, 4: default,
        3: BackendQueuePolicy(max_queue_size=1, allow_timeout_override=True)}


def test_overrides_merge_into_the_built_config() -> None:
    overrides = {"parameters": {"tenant": {"string_value": "research"}},
                 "dynamic_batching": {"max_queue_delay_microseconds": 100},
                 "version_policy": {"latest": {"num_versions": 1}}}
    config = config_builder.to_json_dict(config_builder.build("m", ServingSettings(), overrides))
    assert config["parameters"]["tenant"] == {"string_value": "research"}
    assert config["parameters"]["reserved_urgent_slots"] == {"string_value": "1"}
    assert config["parameters"]["priority_levels"] == {"string_value": "3"}
    assert config["dynamic_batching"] == {"max_queue_delay_microseconds": "100"}
    assert config["version_policy"] == {"latest": {"num_versions": 1}}
    config_builder.check("m", ServingSettings(), overrides, {}, "/models/m")


def test_a_stored_version_with_the_retired_batcher_wakeup_parameter_still_builds() -> None:
    # Versions registered while the backend had batcher wake-ups may carry the parameter; the
    # backend no longer reads it, and such a version must stay deployable.
    overrides = {"parameters": {"batcher_wakeup": {"string_value": "false"}}}
    config = config_builder.check("m", ServingSettings(), overrides, {}, "/models/m")
    assert config["parameters"]["batcher_wakeup"] == {"string_value": "false"}
    assert config["dynamic_batching"] == {}


_PREFETCH = "turns off Triton's payload prefetching (requests then stall ~500 ms)"


@pytest.mark.parametrize("overrides,message", [
    ({"input": []}, "'input' cannot be overridden: the tensor interface is fixed"),
    ({"backend": "python"}, "'backend' cannot be overridden: the backend is always llm_vllm"),
    ({"instance_group": [{"kind": "KIND_GPU"}]},
     "'instance_group' cannot be overridden: placement assigns instance groups"),
    ({"instanceGroup": [{"kind": "KIND_GPU"}]},
     "'instance_group' cannot be overridden: placement assigns instance groups"),
    ({"sequence_batching": {}},
     ("'sequence_batching' cannot be overridden: an LLM version uses Triton's dynamic batcher, "
     "and the backend's own queue orders requests by priority level")),
    ({"dynamic_batching": {"priority_levels": 5}},
     (f"'dynamic_batching.priority_levels' {_PREFETCH}: set serving.priority_levels instead, "
     "which the backend's queue enforces")),
    ({"dynamic_batching": {"default_priority_level": 1}},
     (f"'dynamic_batching.default_priority_level' {_PREFETCH}: set "
     "serving.default_priority_level instead")),
    ({"dynamic_batching": {"default_queue_policy": {"max_queue_size": 8}}},
     (f"'dynamic_batching.default_queue_policy' {_PREFETCH}: set serving.default_queue_policy "
     "instead")),
    ({"dynamic_batching": {"priorityQueuePolicy": {"1": {"max_queue_size": 8}}}},
     (f"'dynamic_batching.priority_queue_policy' {_PREFETCH}: set "
     "serving.priority_queue_policies instead")),
    ({"parameters": {"reserved_urgent_slots": {"string_value": "0"}}},
     "'parameters.reserved_urgent_slots' is set through serving.reserved_urgent_slots"),
    ({"parameters": {"priority_levels": {"string_value": "2"}}},
     "'parameters.priority_levels' is set through serving.priority_levels"),
    ({"parameters": {"default_priority_level": {"string_value": "1"}}},
     "'parameters.default_priority_level' is set through serving.default_priority_level"),
    ({"parameters": {"default_queue_policy": {"string_value": "{}"}}},
     "'parameters.default_queue_policy' is set through serving.default_queue_policy"),
    ({"parameters": {"priority_queue_policy.3": {"string_value": "{}"}}},
     "'parameters.priority_queue_policy.3' is set through serving.priority_queue_policies"),
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


def test_every_refused_field_is_named_at_once() -> None:
    overrides = {"dynamic_batching": {"priority_levels": 2, "max_queue_delay_microseconds": 10},
                 "parameters": {"priority_queue_policy.1": {"string_value": "{}"},
                                "priority_queue_policy.2": {"string_value": "{}"}}}
    with pytest.raises(InvalidTritonConfig) as refused:
        config_builder.parse_overrides(overrides)
    assert refused.value.message == (
        f"triton_config: 'dynamic_batching.priority_levels' {_PREFETCH}: set "
        "serving.priority_levels instead, which the backend's queue enforces; "
        "'parameters.priority_queue_policy.1' is set through serving.priority_queue_policies; "
        "'parameters.priority_queue_policy.2' is set through serving.priority_queue_policies")


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
