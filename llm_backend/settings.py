"""The backend's settings: vLLM engine arguments from ``<version>/model.json`` and our own knobs
from the model config's ``parameters``, validated once at load time."""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_backend.parameters import parameter_text
from llm_backend.priority import PriorityLevels
from llm_backend.queue_config import (
    QueueConfigError,
    levels_from_model_config,
    policies_from_model_config,
    refuse_triton_queue_settings,
)
from llm_backend.scheduler import QueuePolicy

_UNEXPANDED = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


class SettingsError(ValueError):
    """The model's configuration cannot be served; the message names the setting."""


@dataclass(frozen=True)
class BackendSettings:
    engine_args: dict[str, Any]
    levels: PriorityLevels
    # None: take the engine's max_num_seqs once it is built.
    max_inflight: int | None
    # Engine slots only levels <= urgent_level may take; None: 1 when there are priority levels.
    reserved_urgent_slots: int | None
    urgent_level: int
    queue_policies: dict[int, QueuePolicy]
    back_pressure: bool
    priority_passthrough: bool
    drain_timeout_s: float
    # Publish vLLM's stats as the stock vLLM backend's vllm:* families (stock_metrics.py).
    report_custom_metrics: bool = False
    # A tenant with nothing running may stop another tenant's request to start (scheduler.py).
    fair_share_preemption: bool = True


def _flag(model_config: dict[str, Any], key: str, default: bool) -> bool:
    text = parameter_text(model_config, key)
    if text is None:
        return default
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise SettingsError(f"parameters.{key}: expected true or false, got {text!r} (accepted, "
                        f"any case: {', '.join(_TRUE)} / {', '.join(_FALSE)})")


def _number(model_config: dict[str, Any], key: str, kind: type, minimum: float) -> Any:
    text = parameter_text(model_config, key)
    if text is None:
        return None
    try:
        value = kind(text)
    except ValueError:
        raise SettingsError(f"parameters.{key}: expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < minimum:
        raise SettingsError(f"parameters.{key}: must be at least {minimum}, got {value}")
    return value


def _expand(value: Any, where: str) -> Any:
    """Expand $VARS in string values, so one model.json serves on any machine."""
    if not isinstance(value, str):
        return value
    expanded = os.path.expandvars(value)
    leftover = _UNEXPANDED.search(expanded)
    if leftover:
        raise SettingsError(f"model.json {where}: environment variable {leftover.group(0)} is not set")
    return expanded


def load_engine_args(path: Path) -> dict[str, Any]:
    """Read vLLM engine arguments from ``model.json``."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise SettingsError(f"{path} is missing: the model version needs a model.json") from None
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{path}: invalid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(raw, dict) or "model" not in raw:
        raise SettingsError(f"{path}: must be a JSON object with at least a \"model\" key")
    return {key: _expand(value, key) for key, value in raw.items()}


def load_settings(model_config: dict[str, Any], version_dir: Path) -> BackendSettings:
    """Build settings from Triton's model config (JSON form) and the version directory."""
    return settings_from(model_config, load_engine_args(version_dir / "model.json"))


def settings_from(model_config: dict[str, Any], engine_args: dict[str, Any]) -> BackendSettings:
    """Check and build settings from a model config (JSON form) and expanded engine arguments.

    The control plane runs this same check when a version is registered, so a config the backend
    would refuse at load is refused before it is ever deployed.
    """
    engine_args = dict(engine_args)
    passthrough = _flag(model_config, "priority_passthrough", True)
    if passthrough:
        policy = engine_args.setdefault("scheduling_policy", "priority")
        if policy != "priority":
            raise SettingsError(
                f"model.json scheduling_policy is {policy!r}, but priority_passthrough needs "
                "\"priority\"; set parameters.priority_passthrough to false to run FCFS"
            )
    drain_timeout_s = _number(model_config, "drain_timeout_seconds", float, 0)
    try:
        refuse_triton_queue_settings(model_config)
        levels = levels_from_model_config(model_config)
        queue_policies = policies_from_model_config(model_config, levels.count)
    except QueueConfigError as exc:
        raise SettingsError(str(exc)) from None
    urgent_level = _number(model_config, "urgent_priority_level", int, 1) or 1
    if urgent_level > levels.count:
        raise SettingsError(
            f"parameters.urgent_priority_level: {urgent_level} is not one of the {levels.count} levels"
        )
    return BackendSettings(
        engine_args=engine_args,
        levels=levels,
        max_inflight=_number(model_config, "max_inflight_requests", int, 1),
        reserved_urgent_slots=_number(model_config, "reserved_urgent_slots", int, 0),
        urgent_level=urgent_level,
        queue_policies=queue_policies,
        back_pressure=_flag(model_config, "back_pressure", True),
        priority_passthrough=passthrough,
        drain_timeout_s=30.0 if drain_timeout_s is None else drain_timeout_s,
        report_custom_metrics=_flag(model_config, "REPORT_CUSTOM_METRICS", False),
        fair_share_preemption=_flag(model_config, "fair_share_preemption", True),
    )
