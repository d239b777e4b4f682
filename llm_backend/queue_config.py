"""Where a model config declares its priority levels and queue policies: in ``parameters``, which
only this backend reads, and never in Triton's ``dynamic_batching``.

Why not ``dynamic_batching``: Triton turns payload prefetching off for a model whose batcher has
priority levels or a queue policy with a timeout, an override or a size limit, and a request that
then arrives while ``execute()`` runs waits out the batcher's 500 ms timed wait (README, "Design
notes"). Waiting requests are held in this backend's queue anyway, so the levels and policies are
declared for it alone, and Triton's batcher is left with nothing that turns prefetching off::

    parameters { key: "priority_levels" value { string_value: "3" } }
    parameters { key: "default_priority_level" value { string_value: "3" } }
    parameters { key: "default_queue_policy" value { string_value:
        '{"max_queue_size": 256, "default_timeout_microseconds": 120000000, "allow_timeout_override": true}' } }
    parameters { key: "priority_queue_policy.1" value { string_value: '{"max_queue_size": 16}' } }

A policy is a JSON object with the fields of Triton's ``ModelQueuePolicy``; a level without an
entry of its own takes ``default_queue_policy``.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from llm_backend.parameters import parameter_text
from llm_backend.priority import PriorityLevels
from llm_backend.scheduler import QueuePolicy

PRIORITY_LEVELS = "priority_levels"
DEFAULT_PRIORITY_LEVEL = "default_priority_level"
DEFAULT_QUEUE_POLICY = "default_queue_policy"
LEVEL_QUEUE_POLICY_PREFIX = "priority_queue_policy."
# Bounded like Triton's own field, so a typo cannot make a million queues.
MAX_PRIORITY_LEVELS = 16
POLICY_FIELDS = ("timeout_action", "default_timeout_microseconds", "allow_timeout_override",
                 "max_queue_size")


class QueueConfigError(ValueError):
    """The levels or queue policies cannot be served; the message names the setting and the fix."""


def level_policy_key(level: int) -> str:
    return f"{LEVEL_QUEUE_POLICY_PREFIX}{level}"


def _integer(model_config: dict[str, Any], key: str) -> int | None:
    text = parameter_text(model_config, key)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise QueueConfigError(f"parameters.{key}: expected an integer, got {text!r}") from None


def refuse_triton_queue_settings(model_config: dict[str, Any]) -> None:
    """Refuse the ``dynamic_batching`` fields that turn Triton's payload prefetching off."""
    batching = model_config.get("dynamic_batching") or {}
    found = []
    if int(batching.get("priority_levels") or 0) > 0:
        found.append("priority_levels")
    if int(batching.get("default_priority_level") or 0) > 0:
        found.append("default_priority_level")
    if _policy_restricts(batching.get("default_queue_policy")):
        found.append("default_queue_policy")
    if batching.get("priority_queue_policy"):
        found.append("priority_queue_policy")
    if found:
        fields = ", ".join(f"dynamic_batching.{name}" for name in found)
        raise QueueConfigError(
            f"{fields}: Triton turns payload prefetching off for these, and requests then stall "
            "up to 500 ms in its batcher; declare the levels and queue policies as parameters "
            f"instead ({PRIORITY_LEVELS}, {DEFAULT_PRIORITY_LEVEL}, {DEFAULT_QUEUE_POLICY}, "
            f"{LEVEL_QUEUE_POLICY_PREFIX}N), which the backend's own queue enforces"
        )


def _policy_restricts(raw: Any) -> bool:
    # Triton's JSON form prints every field, defaults included: only non-default values count.
    if not raw:
        return False
    return bool(int(raw.get("default_timeout_microseconds") or 0)
                or raw.get("allow_timeout_override") is True
                or int(raw.get("max_queue_size") or 0))


def levels_from_model_config(model_config: dict[str, Any]) -> PriorityLevels:
    """The declared levels; none declared means one level."""
    count = _integer(model_config, PRIORITY_LEVELS)
    if count is None:
        count = 1
    if not 1 <= count <= MAX_PRIORITY_LEVELS:
        raise QueueConfigError(
            f"parameters.{PRIORITY_LEVELS}: must be 1..{MAX_PRIORITY_LEVELS}, got {count}")
    default = _integer(model_config, DEFAULT_PRIORITY_LEVEL)
    if default is None:
        default = count
    if not 1 <= default <= count:
        raise QueueConfigError(
            f"parameters.{DEFAULT_PRIORITY_LEVEL}: {default} is not one of the {count} levels")
    return PriorityLevels(count=count, default=default)


def policies_from_model_config(model_config: dict[str, Any], levels: int) -> dict[int, QueuePolicy]:
    """Per-level policies: a level's own entry, else the default policy."""
    default = _policy(model_config, DEFAULT_QUEUE_POLICY)
    parameters = model_config.get("parameters") or {}
    for key in parameters:
        if key.startswith(LEVEL_QUEUE_POLICY_PREFIX):
            suffix = key[len(LEVEL_QUEUE_POLICY_PREFIX):]
            if not suffix.isdigit() or not 1 <= int(suffix) <= levels:
                raise QueueConfigError(
                    f"parameters.{key}: names no level of this model (levels 1..{levels})")
    return {
        level: _policy(model_config, level_policy_key(level)) or default or QueuePolicy()
        for level in range(1, levels + 1)
    }


def _policy(model_config: dict[str, Any], key: str) -> QueuePolicy | None:
    text = parameter_text(model_config, key)
    if text is None:
        return None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise QueueConfigError(f"parameters.{key}: invalid JSON ({exc.msg}); expected an object "
                               f"with the fields {', '.join(POLICY_FIELDS)}") from None
    if not isinstance(raw, dict):
        raise QueueConfigError(f"parameters.{key}: expected a JSON object, got {text!r}")
    for field_name in raw:
        if field_name not in POLICY_FIELDS:
            close = difflib.get_close_matches(field_name, POLICY_FIELDS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise QueueConfigError(f"parameters.{key}: unknown field {field_name!r}{hint}")
    override = raw.get("allow_timeout_override", False)
    if not isinstance(override, bool):
        raise QueueConfigError(
            f"parameters.{key}: allow_timeout_override must be true or false, got {override!r}")
    for field_name in ("default_timeout_microseconds", "max_queue_size"):
        value = raw.get(field_name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise QueueConfigError(
                f"parameters.{key}: {field_name} must be a non-negative integer, got {value!r}")
    try:
        return QueuePolicy.from_config(raw)
    except ValueError as exc:
        raise QueueConfigError(f"parameters.{key}: {exc}") from None
