"""Turn a client's sampling parameters (JSON) into validated vLLM ``SamplingParams``.

Accepts the keys clients of Triton's stock vLLM backend send; values may arrive as strings, because
HTTP ``parameters`` and the ``sampling_parameters`` JSON are often written by hand.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from typing import Any

from vllm import SamplingParams
from vllm.exceptions import VLLMClientError
from vllm.sampling_params import RequestOutputKind

from llm_backend.errors import InvalidRequest

_INT = "an integer"
_FLOAT = "a number"
_BOOL = "a boolean"
_STOP = "a string or a list of strings"
_INT_LIST = "a list of integers"

# The SamplingParams fields a client may set, by the JSON type each accepts. Internal fields
# (output_kind, detokenize, structured outputs, logits processors, ...) stay ours to decide.
SAMPLING_FIELDS: dict[str, str] = {
    "n": _INT,
    "max_tokens": _INT,
    "min_tokens": _INT,
    "top_k": _INT,
    "seed": _INT,
    "temperature": _FLOAT,
    "top_p": _FLOAT,
    "min_p": _FLOAT,
    "presence_penalty": _FLOAT,
    "frequency_penalty": _FLOAT,
    "repetition_penalty": _FLOAT,
    "ignore_eos": _BOOL,
    "skip_special_tokens": _BOOL,
    "spaces_between_special_tokens": _BOOL,
    "include_stop_str_in_output": _BOOL,
    "stop": _STOP,
    "stop_token_ids": _INT_LIST,
}


def parse_json_object(text: str, field: str) -> dict[str, Any]:
    """Parse ``text`` as a JSON object, naming ``field`` when it is not one."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(field, f"is not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(value, dict):
        raise InvalidRequest(field, f"must be a JSON object, got {type(value).__name__}")
    return value


def _coerce(key: str, kind: str, value: Any) -> Any:
    field = f"sampling_parameters.{key}"
    if value is None and key in ("seed", "max_tokens", "stop", "stop_token_ids"):
        return None
    if kind == _INT:
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        elif isinstance(value, int) and not isinstance(value, bool):
            return value
        elif isinstance(value, float) and value.is_integer():
            return int(value)
    elif kind == _FLOAT:
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif kind == _BOOL:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
    elif kind == _STOP:
        if isinstance(value, str):
            return value
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return value
    elif kind == _INT_LIST:
        if isinstance(value, list) and all(
            isinstance(item, int) and not isinstance(item, bool) for item in value
        ):
            return value
    raise InvalidRequest(field, f"must be {kind}, got {json.dumps(value)}")


def build_sampling_params(raw: Mapping[str, Any], *, streaming: bool) -> SamplingParams:
    """Validate ``raw`` and build the vLLM ``SamplingParams`` for it.

    Unknown keys are refused with the closest known names, so a typo never silently falls back to
    a default. Range checks are vLLM's own; its message is passed on with the field named.
    """
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        kind = SAMPLING_FIELDS.get(key)
        if kind is None:
            close = difflib.get_close_matches(key, SAMPLING_FIELDS, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise InvalidRequest(
                f"sampling_parameters.{key}",
                f"unknown sampling parameter{hint} (accepted: {', '.join(sorted(SAMPLING_FIELDS))})",
            )
        kwargs[key] = _coerce(key, kind, value)
    # Deltas keep streaming O(n); a non-streaming request only needs the final output.
    kwargs["output_kind"] = RequestOutputKind.DELTA if streaming else RequestOutputKind.FINAL_ONLY
    try:
        return SamplingParams(**kwargs)
    except (ValueError, TypeError, VLLMClientError) as exc:
        message = str(exc).split("\n")[0]
        # vLLM's validation errors end with "(parameter=<name>, value=...)"; older messages
        # start with the field name.
        named = re.search(r"\(parameter=(\w+)", message)
        field = named.group(1) if named else next(
            (key for key in raw if message.startswith(key)), None)
        name = f"sampling_parameters.{field}" if field else "sampling_parameters"
        raise InvalidRequest(name, message) from None
