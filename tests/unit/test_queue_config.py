"""Unit tests for llm_backend.queue_config: levels and queue policies declared as parameters, and
the refusal of Triton queue settings that turn its payload prefetching off."""

from __future__ import annotations

import json

import pytest

from llm_backend.priority import PriorityLevels
from llm_backend.queue_config import (
    QueueConfigError,
    levels_from_model_config,
    policies_from_model_config,
    refuse_triton_queue_settings,
)
from llm_backend.scheduler import AdmissionScheduler, QueuePolicy, QueueRejected


def params(**values: object) -> dict:
    """A model config with these parameters; dict values become JSON strings."""
    return {"parameters": {
        key.replace("__", "."): {"string_value": json.dumps(value) if isinstance(value, dict)
                                 else str(value)}
        for key, value in values.items()
    }}


# -- levels --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({}, PriorityLevels(1, 1)),
        ({"parameters": {}}, PriorityLevels(1, 1)),
        (params(priority_levels=""), PriorityLevels(1, 1)),
        (params(priority_levels=3), PriorityLevels(3, 3)),
        (params(priority_levels=" 3 ", default_priority_level=2), PriorityLevels(3, 2)),
        (params(priority_levels=4, default_priority_level=1), PriorityLevels(4, 1)),
        (params(priority_levels=16), PriorityLevels(16, 16)),
    ],
)
def test_levels(config, expected):
    assert levels_from_model_config(config) == expected


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (params(priority_levels=0), "parameters.priority_levels: must be 1..16, got 0"),
        (params(priority_levels=17), "parameters.priority_levels: must be 1..16, got 17"),
        (params(priority_levels="three"),
         "parameters.priority_levels: expected an integer, got 'three'"),
        (params(priority_levels=3, default_priority_level=4),
         "parameters.default_priority_level: 4 is not one of the 3 levels"),
        (params(default_priority_level=2),
         "parameters.default_priority_level: 2 is not one of the 1 levels"),
    ],
)
def test_levels_refused(config, message):
    with pytest.raises(QueueConfigError) as info:
        levels_from_model_config(config)
    assert str(info.value) == message


# -- policies ------------------------------------------------------------------------------------


def test_no_policies_means_unbounded_queues():
    assert policies_from_model_config({}, 3) == {1: QueuePolicy(), 2: QueuePolicy(),
                                                 3: QueuePolicy()}


def test_policies_per_level_and_default():
    config = params(
        priority_levels=3,
        default_queue_policy={"max_queue_size": 256, "default_timeout_microseconds": 120000000,
                              "allow_timeout_override": True},
        priority_queue_policy__1={"max_queue_size": 16, "default_timeout_microseconds": 30000000,
                                  "allow_timeout_override": True},
        priority_queue_policy__2={"max_queue_size": 64},
    )
    assert policies_from_model_config(config, 3) == {
        1: QueuePolicy(max_queue_size=16, default_timeout_s=30.0, allow_timeout_override=True),
        # A level's own entry replaces the default entirely; it does not inherit its fields.
        2: QueuePolicy(max_queue_size=64),
        3: QueuePolicy(max_queue_size=256, default_timeout_s=120.0, allow_timeout_override=True),
    }


def test_shipped_pbtxt_form_with_reject_action():
    config = {"parameters": {"default_queue_policy": {"string_value":
              '{"timeout_action": "REJECT", "max_queue_size": 5}'}}}
    assert policies_from_model_config(config, 1) == {1: QueuePolicy(max_queue_size=5)}


@pytest.mark.parametrize(
    ("config", "levels", "fragment"),
    [
        (params(priority_queue_policy__4={"max_queue_size": 1}), 3,
         "parameters.priority_queue_policy.4: names no level of this model (levels 1..3)"),
        (params(priority_queue_policy__x={"max_queue_size": 1}), 3,
         "parameters.priority_queue_policy.x: names no level"),
        ({"parameters": {"default_queue_policy": {"string_value": "{max_queue_size: 3}"}}}, 1,
         "parameters.default_queue_policy: invalid JSON"),
        ({"parameters": {"default_queue_policy": {"string_value": "[1]"}}}, 1,
         "parameters.default_queue_policy: expected a JSON object"),
        (params(default_queue_policy={"max_queue_sise": 3}), 1,
         "unknown field 'max_queue_sise'; did you mean 'max_queue_size'?"),
        (params(default_queue_policy={"max_queue_size": -1}), 1,
         "max_queue_size must be a non-negative integer, got -1"),
        (params(default_queue_policy={"max_queue_size": "8"}), 1,
         "max_queue_size must be a non-negative integer, got '8'"),
        (params(default_queue_policy={"default_timeout_microseconds": 1.5}), 1,
         "default_timeout_microseconds must be a non-negative integer, got 1.5"),
        (params(default_queue_policy={"allow_timeout_override": "false"}), 1,
         "allow_timeout_override must be true or false, got 'false'"),
        (params(default_queue_policy={"timeout_action": "DELAY"}), 1,
         "timeout_action 'DELAY' is not supported by this backend; use REJECT"),
    ],
)
def test_policies_refused(config, levels, fragment):
    with pytest.raises(QueueConfigError) as info:
        policies_from_model_config(config, levels)
    assert fragment in str(info.value)


def test_policies_drive_the_scheduler():
    config = params(priority_queue_policy__1={"max_queue_size": 1})
    rejected: list[str] = []
    sched = AdmissionScheduler(
        capacity=1, reserved=0, urgent_level=1, policies=policies_from_model_config(config, 2),
        start=lambda item, level: None, reject=lambda item, error: rejected.append(item),
    )
    sched.submit("run", 2)
    sched.submit("u1", 1)
    with pytest.raises(QueueRejected, match="priority level 1 queue is full"):
        sched.submit("u2", 1)
    sched.submit("e1", 2)  # level 2 has no entry: the default, unbounded


# -- Triton's own queue settings are refused -----------------------------------------------------


@pytest.mark.parametrize(
    "batching",
    [
        None,
        {},
        {"max_queue_delay_microseconds": "100"},
        # Triton's JSON form of an empty dynamic_batching prints every field with its default.
        {"preferred_batch_size": [], "max_queue_delay_microseconds": "0", "preserve_ordering": False,
         "priority_levels": "0", "default_priority_level": "0", "priority_queue_policy": {},
         "default_queue_policy": {"timeout_action": "REJECT", "default_timeout_microseconds": "0",
                                  "allow_timeout_override": False, "max_queue_size": 0}},
    ],
)
def test_batching_that_keeps_prefetching_is_accepted(batching):
    refuse_triton_queue_settings({"dynamic_batching": batching})


@pytest.mark.parametrize(
    ("batching", "fields"),
    [
        ({"priority_levels": "3"}, "dynamic_batching.priority_levels"),
        ({"priority_levels": 3, "default_priority_level": 3},
         "dynamic_batching.priority_levels, dynamic_batching.default_priority_level"),
        ({"default_queue_policy": {"max_queue_size": 4}}, "dynamic_batching.default_queue_policy"),
        ({"default_queue_policy": {"default_timeout_microseconds": "1000"}},
         "dynamic_batching.default_queue_policy"),
        ({"default_queue_policy": {"allow_timeout_override": True}},
         "dynamic_batching.default_queue_policy"),
        ({"priority_queue_policy": {"1": {"max_queue_size": 2}}},
         "dynamic_batching.priority_queue_policy"),
    ],
)
def test_batching_that_turns_prefetching_off_is_refused(batching, fields):
    with pytest.raises(QueueConfigError) as info:
        refuse_triton_queue_settings({"dynamic_batching": batching})
    message = str(info.value)
    assert message.startswith(f"{fields}: Triton turns payload prefetching off")
    assert "declare the levels and queue policies as parameters instead" in message
    assert "priority_queue_policy.N" in message
