"""Unit tests for llm_backend.settings: model.json engine args and config parameters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_backend.priority import PriorityLevels
from llm_backend.scheduler import QueuePolicy
from llm_backend.settings import (
    BackendSettings,
    SettingsError,
    load_engine_args,
    load_settings,
    settings_from,
)


def write_model_json(directory: Path, content) -> Path:
    path = directory / "model.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def config(**parameters: str) -> dict:
    return {"parameters": {key: {"string_value": value} for key, value in parameters.items()}}


@pytest.fixture
def version_dir(tmp_path: Path) -> Path:
    write_model_json(tmp_path, {"model": "facebook/opt-125m", "max_num_seqs": 4})
    return tmp_path


# -- load_engine_args ----------------------------------------------------------------------------


def test_load_engine_args_plain(tmp_path):
    path = write_model_json(
        tmp_path, {"model": "m", "max_model_len": 512, "enforce_eager": True, "dtype": None}
    )
    assert load_engine_args(path) == {
        "model": "m", "max_model_len": 512, "enforce_eager": True, "dtype": None,
    }


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("$LLM_TEST_DIR/model", "/data/models/model"),
        ("${LLM_TEST_DIR}/model", "/data/models/model"),
        ("${LLM_TEST_DIR}${LLM_TEST_NAME}", "/data/modelsopt"),
        ("$LLM_TEST_DIR/$LLM_TEST_NAME", "/data/models/opt"),
        ("no variables", "no variables"),
        ("cost $5", "cost $5"),  # not a variable name
    ],
)
def test_env_var_expansion(tmp_path, monkeypatch, template, expected):
    monkeypatch.setenv("LLM_TEST_DIR", "/data/models")
    monkeypatch.setenv("LLM_TEST_NAME", "opt")
    path = write_model_json(tmp_path, {"model": template, "tokenizer": template, "seed": 3})
    args = load_engine_args(path)
    assert args["model"] == expected
    assert args["tokenizer"] == expected
    assert args["seed"] == 3


@pytest.mark.parametrize(
    ("template", "shown"),
    [("$LLM_TEST_UNSET_VAR/x", "$LLM_TEST_UNSET_VAR"),
     ("${LLM_TEST_UNSET_VAR}/x", "${LLM_TEST_UNSET_VAR}"),
     ("/ok/${LLM_TEST_SET}/$LLM_TEST_UNSET_VAR", "$LLM_TEST_UNSET_VAR")],
)
def test_env_var_unset_is_an_error(tmp_path, monkeypatch, template, shown):
    monkeypatch.delenv("LLM_TEST_UNSET_VAR", raising=False)
    monkeypatch.setenv("LLM_TEST_SET", "yes")
    path = write_model_json(tmp_path, {"model": "m", "download_dir": template})
    with pytest.raises(SettingsError) as info:
        load_engine_args(path)
    message = str(info.value)
    assert "model.json download_dir" in message
    assert f"environment variable {shown} is not set" in message


def test_missing_model_json(tmp_path):
    with pytest.raises(SettingsError, match="is missing: the model version needs a model.json"):
        load_engine_args(tmp_path / "model.json")


@pytest.mark.parametrize("text", ["{", '{"model": "m",}', "", "model: m"])
def test_invalid_json(tmp_path, text):
    path = write_model_json(tmp_path, text)
    with pytest.raises(SettingsError) as info:
        load_engine_args(path)
    assert "invalid JSON" in str(info.value)
    assert "line " in str(info.value)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("content", [{}, {"max_num_seqs": 4}, ["model"], "m", None, 3])
def test_missing_model_key(tmp_path, content):
    path = write_model_json(tmp_path, json.dumps(content))
    with pytest.raises(SettingsError, match='at least a "model" key'):
        load_engine_args(path)


def test_settings_error_is_value_error():
    assert issubclass(SettingsError, ValueError)


# -- load_settings -------------------------------------------------------------------------------


def test_defaults(version_dir):
    settings = load_settings({}, version_dir)
    assert isinstance(settings, BackendSettings)
    assert settings.engine_args == {
        "model": "facebook/opt-125m", "max_num_seqs": 4, "scheduling_policy": "priority",
    }
    assert settings.levels == PriorityLevels(count=1, default=1)
    assert settings.max_inflight is None
    assert settings.reserved_urgent_slots is None
    assert settings.urgent_level == 1
    assert settings.queue_policies == {1: QueuePolicy()}
    assert settings.back_pressure is True
    assert settings.priority_passthrough is True
    assert settings.drain_timeout_s == 30.0


def test_missing_model_json_propagates(tmp_path):
    with pytest.raises(SettingsError, match="model.json"):
        load_settings({}, tmp_path)


@pytest.mark.parametrize("key", ["back_pressure", "priority_passthrough"])
@pytest.mark.parametrize(
    ("text", "expected"),
    [("true", True), ("TRUE", True), (" True ", True), ("1", True), ("yes", True), ("on", True),
     ("false", False), ("False", False), ("0", False), ("no", False), ("off", False),
     ("", True), ("   ", True)],  # empty: default (True for both)
)
def test_flags(version_dir, key, text, expected):
    settings = load_settings(config(**{key: text}), version_dir)
    assert getattr(settings, key) is expected


@pytest.mark.parametrize("key", ["back_pressure", "priority_passthrough"])
@pytest.mark.parametrize("text", ["maybe", "2", "truee", "y"])
def test_bad_flags(version_dir, key, text):
    with pytest.raises(SettingsError) as info:
        load_settings(config(**{key: text}), version_dir)
    assert str(info.value) == (f"parameters.{key}: expected true or false, got {text!r} "
                               "(accepted, any case: true, 1, yes, on / false, 0, no, off)")


def test_parameter_without_string_value_is_default(version_dir):
    settings = load_settings({"parameters": {"back_pressure": {}}}, version_dir)
    assert settings.back_pressure is True


def test_parameters_none(version_dir):
    assert load_settings({"parameters": None}, version_dir).back_pressure is True


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", None), ("  ", None), ("1", 1), ("8", 8), (" 64 ", 64)],
)
def test_max_inflight_requests(version_dir, text, expected):
    settings = load_settings(config(max_inflight_requests=text), version_dir)
    assert settings.max_inflight == expected
    if expected is not None:
        assert type(settings.max_inflight) is int


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("0", "must be at least 1, got 0"), ("-3", "must be at least 1, got -3"),
     ("many", "expected a number, got 'many'"), ("2.5", "expected a number, got '2.5'")],
)
def test_max_inflight_requests_errors(version_dir, text, fragment):
    with pytest.raises(SettingsError) as info:
        load_settings(config(max_inflight_requests=text), version_dir)
    assert str(info.value) == f"parameters.max_inflight_requests: {fragment}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 30.0), ("0", 0.0), ("0.0", 0.0), ("2.5", 2.5), ("120", 120.0)],
)
def test_drain_timeout_seconds(version_dir, text, expected):
    settings = load_settings(config(drain_timeout_seconds=text), version_dir)
    assert settings.drain_timeout_s == expected
    assert isinstance(settings.drain_timeout_s, float)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("-1", "must be at least 0, got -1.0"), ("soon", "expected a number, got 'soon'")],
)
def test_drain_timeout_seconds_errors(version_dir, text, fragment):
    with pytest.raises(SettingsError) as info:
        load_settings(config(drain_timeout_seconds=text), version_dir)
    assert str(info.value) == f"parameters.drain_timeout_seconds: {fragment}"


def test_scheduling_policy_defaults_to_priority(version_dir):
    assert load_settings({}, version_dir).engine_args["scheduling_policy"] == "priority"


def test_scheduling_policy_priority_kept(tmp_path):
    write_model_json(tmp_path, {"model": "m", "scheduling_policy": "priority"})
    assert load_settings({}, tmp_path).engine_args["scheduling_policy"] == "priority"


@pytest.mark.parametrize("passthrough", [None, "true"])
def test_passthrough_with_fcfs_is_an_error(tmp_path, passthrough):
    write_model_json(tmp_path, {"model": "m", "scheduling_policy": "fcfs"})
    cfg = {} if passthrough is None else config(priority_passthrough=passthrough)
    with pytest.raises(SettingsError) as info:
        load_settings(cfg, tmp_path)
    message = str(info.value)
    assert "scheduling_policy is 'fcfs'" in message
    assert "priority_passthrough" in message
    assert "set parameters.priority_passthrough to false" in message


def test_passthrough_off_allows_fcfs(tmp_path):
    write_model_json(tmp_path, {"model": "m", "scheduling_policy": "fcfs"})
    settings = load_settings(config(priority_passthrough="false"), tmp_path)
    assert settings.priority_passthrough is False
    assert settings.engine_args["scheduling_policy"] == "fcfs"


def test_passthrough_off_leaves_policy_unset(version_dir):
    settings = load_settings(config(priority_passthrough="false"), version_dir)
    assert "scheduling_policy" not in settings.engine_args


@pytest.mark.parametrize(
    ("parameters", "levels"),
    [
        ({"priority_levels": "3", "default_priority_level": "3"}, PriorityLevels(3, 3)),
        ({"priority_levels": "2", "default_priority_level": "1"}, PriorityLevels(2, 1)),
        ({"priority_levels": "5"}, PriorityLevels(5, 5)),
        ({}, PriorityLevels(1, 1)),
    ],
)
def test_priority_levels_from_parameters(version_dir, parameters, levels):
    cfg = {**config(back_pressure="true", **parameters), "dynamic_batching": {}}
    assert load_settings(cfg, version_dir).levels == levels


@pytest.mark.parametrize(
    "batching",
    [{"priority_levels": 3}, {"default_queue_policy": {"max_queue_size": 8}},
     {"priority_queue_policy": {"1": {"max_queue_size": 1}}}],
)
def test_triton_queue_settings_are_refused_at_load(version_dir, batching):
    with pytest.raises(SettingsError) as info:
        load_settings({**config(priority_levels="3"), "dynamic_batching": batching}, version_dir)
    assert "Triton turns payload prefetching off" in str(info.value)


@pytest.mark.parametrize(
    ("parameters", "fragment"),
    [({"priority_levels": "0"}, "parameters.priority_levels: must be 1..16"),
     ({"default_queue_policy": "{"}, "parameters.default_queue_policy: invalid JSON")],
)
def test_bad_levels_or_policies_are_settings_errors(version_dir, parameters, fragment):
    with pytest.raises(SettingsError) as info:
        load_settings(config(**parameters), version_dir)
    assert str(info.value).startswith(fragment)


def test_full_config(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_TEST_MODELS", "/models")
    write_model_json(tmp_path, {"model": "${LLM_TEST_MODELS}/opt", "max_model_len": 256})
    cfg = {
        **config(
            max_inflight_requests="16", back_pressure="false",
            drain_timeout_seconds="5", reserved_urgent_slots="2", urgent_priority_level="2",
            priority_levels="3", default_priority_level="3",
            default_queue_policy='{"max_queue_size": 256, "default_timeout_microseconds": 120000000}',
            **{"priority_queue_policy.1": '{"max_queue_size": 16, '
               '"default_timeout_microseconds": 30000000, "allow_timeout_override": true}'},
        ),
        "dynamic_batching": {},
    }
    settings = load_settings(cfg, tmp_path)
    default_policy = QueuePolicy(max_queue_size=256, default_timeout_s=120.0)
    assert settings == BackendSettings(
        engine_args={"model": "/models/opt", "max_model_len": 256, "scheduling_policy": "priority"},
        levels=PriorityLevels(3, 3),
        max_inflight=16,
        reserved_urgent_slots=2,
        urgent_level=2,
        queue_policies={
            1: QueuePolicy(max_queue_size=16, default_timeout_s=30.0, allow_timeout_override=True),
            2: default_policy,
            3: default_policy,
        },
        back_pressure=False,
        priority_passthrough=True,
        drain_timeout_s=5.0,
    )


@pytest.mark.parametrize("text", ["nan", "inf"])
def test_drain_timeout_seconds_must_be_finite(version_dir, text):
    with pytest.raises(SettingsError):
        load_settings(config(drain_timeout_seconds=text), version_dir)


# -- admission scheduler settings ----------------------------------------------------------------


def levels_config(count: int, **parameters: str) -> dict:
    return config(priority_levels=str(count), **parameters)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", None), ("  ", None), ("0", 0), ("1", 1), (" 3 ", 3)],
)
def test_reserved_urgent_slots(version_dir, text, expected):
    settings = load_settings(levels_config(3, reserved_urgent_slots=text), version_dir)
    assert settings.reserved_urgent_slots == expected
    if expected is not None:
        assert type(settings.reserved_urgent_slots) is int


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("-1", "must be at least 0, got -1"), ("one", "expected a number, got 'one'"),
     ("1.5", "expected a number, got '1.5'")],
)
def test_reserved_urgent_slots_errors(version_dir, text, fragment):
    with pytest.raises(SettingsError) as info:
        load_settings(levels_config(3, reserved_urgent_slots=text), version_dir)
    assert str(info.value) == f"parameters.reserved_urgent_slots: {fragment}"


@pytest.mark.parametrize(
    ("count", "text", "expected"),
    [(3, "", 1), (3, "1", 1), (3, "2", 2), (3, " 3 ", 3), (1, "1", 1), (5, "4", 4)],
)
def test_urgent_priority_level(version_dir, count, text, expected):
    settings = load_settings(levels_config(count, urgent_priority_level=text), version_dir)
    assert settings.urgent_level == expected
    assert type(settings.urgent_level) is int


def test_urgent_priority_level_defaults_to_one_without_levels(version_dir):
    assert load_settings({}, version_dir).urgent_level == 1


@pytest.mark.parametrize(("count", "text"), [(3, "4"), (1, "2"), (2, "10")])
def test_urgent_priority_level_beyond_levels(version_dir, count, text):
    with pytest.raises(SettingsError) as info:
        load_settings(levels_config(count, urgent_priority_level=text), version_dir)
    message = str(info.value)
    assert message.startswith("parameters.urgent_priority_level: ")
    assert f"{text} is not one of the {count} levels" in message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("0", "must be at least 1, got 0"), ("-2", "must be at least 1, got -2"),
     ("high", "expected a number, got 'high'")],
)
def test_urgent_priority_level_errors(version_dir, text, fragment):
    with pytest.raises(SettingsError) as info:
        load_settings(levels_config(3, urgent_priority_level=text), version_dir)
    assert str(info.value) == f"parameters.urgent_priority_level: {fragment}"


def test_queue_policies_default_unbounded_for_every_level(version_dir):
    settings = load_settings(levels_config(3), version_dir)
    assert settings.queue_policies == {1: QueuePolicy(), 2: QueuePolicy(), 3: QueuePolicy()}
    assert QueuePolicy() == QueuePolicy(
        max_queue_size=0, default_timeout_s=0.0, allow_timeout_override=False
    )


def test_queue_policies_as_the_shipped_config_declares_them(version_dir):
    cfg = config(
        priority_levels="3", default_priority_level="3",
        default_queue_policy='{"timeout_action": "REJECT", "default_timeout_microseconds": '
                             '120000000, "allow_timeout_override": true, "max_queue_size": 256}',
        **{"priority_queue_policy.1": '{"max_queue_size": 16, "default_timeout_microseconds": '
                                      '30000000, "allow_timeout_override": true}',
           "priority_queue_policy.2": '{"max_queue_size": 64, "default_timeout_microseconds": '
                                      '60000000}'},
    )
    policies = load_settings(cfg, version_dir).queue_policies
    assert policies == {
        1: QueuePolicy(max_queue_size=16, default_timeout_s=30.0, allow_timeout_override=True),
        2: QueuePolicy(max_queue_size=64, default_timeout_s=60.0, allow_timeout_override=False),
        # Level 3 has no entry of its own: the default policy.
        3: QueuePolicy(max_queue_size=256, default_timeout_s=120.0, allow_timeout_override=True),
    }
    assert type(policies[1].max_queue_size) is int


def test_queue_policies_without_priority_levels(version_dir):
    cfg = config(default_queue_policy='{"max_queue_size": 5}')
    assert load_settings(cfg, version_dir).queue_policies == {1: QueuePolicy(max_queue_size=5)}


def test_shipped_model_config_loads():
    from control_plane.triton.model_config import read_pbtxt, to_load_json
    from control_plane.triton.runtime import PROJECT_ROOT

    shipped = json.loads(to_load_json(read_pbtxt(
        PROJECT_ROOT / "model_repository" / "smollm2" / "config.pbtxt")))
    settings = settings_from(shipped, {"model": "m", "max_num_seqs": 9})
    assert settings.levels == PriorityLevels(3, 3)
    assert settings.queue_policies[1] == QueuePolicy(
        max_queue_size=16, default_timeout_s=30.0, allow_timeout_override=True)
    assert settings.queue_policies[3].max_queue_size == 256
    assert "priority_levels" not in shipped.get("dynamic_batching", {})
