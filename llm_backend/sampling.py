"""Turn a client's sampling parameters (JSON) into validated vLLM ``SamplingParams``.

The accepted keys are vLLM's own: the fields of the installed ``SamplingParams``, less those the
backend owns, so a vLLM upgrade brings its new fields without a change here. Values are converted
to each field's declared type and may arrive as strings, because HTTP ``parameters`` and the
``sampling_parameters`` JSON are often written by hand (the stock backend converts them the same
way).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
from vllm import SamplingParams
from vllm.exceptions import VLLMClientError
from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

from llm_backend.errors import InvalidRequest

# Fields the backend decides: how outputs are streamed and detokenized and in which shape
# logprobs come back (the response tensors depend on them), plugin and debugging hooks that would
# run code or force outputs, and vLLM's internal bookkeeping (also every ``_``-prefixed field).
OWNED_FIELDS = frozenset({
    "output_kind", "detokenize", "flat_logprobs", "skip_clone", "output_text_buffer_length",
    "extra_args", "routed_experts_prompt_start", "trace_decode_token_ids",
})
# Keys the backend takes itself rather than passing to SamplingParams: the stock backend's
# ``lora_name``, and ``truncate_prompt_tokens`` (a tokenization setting since vLLM 0.10).
LORA_NAME = "lora_name"
TRUNCATE_PROMPT_TOKENS = "truncate_prompt_tokens"
STRUCTURED_OUTPUTS = "structured_outputs"
# vLLM's name for structured outputs before 0.10.2; clients written then still send it.
GUIDED_DECODING = "guided_decoding"
BACKEND_KEYS = frozenset({LORA_NAME, TRUNCATE_PROMPT_TOKENS, GUIDED_DECODING})

_HINTS = typing.get_type_hints(SamplingParams)
SAMPLING_FIELDS: dict[str, Any] = {
    name: _HINTS[name] for name in SamplingParams.__struct_fields__
    if not name.startswith("_") and name not in OWNED_FIELDS
}
ACCEPTED_KEYS = frozenset(SAMPLING_FIELDS) | BACKEND_KEYS
STRUCTURED_OUTPUT_FIELDS = frozenset(
    field.name for field in dataclasses.fields(StructuredOutputsParams) if field.init
)
# The one field whose type msgspec cannot convert to (a NumPy array of token ids per prompt row).
_ARRAY_FIELDS = {"prompt_logprob_token_ids": list[list[int]]}


@dataclass(frozen=True)
class ClientSampling:
    """What the client asked for: vLLM's parameters and the keys the backend handles."""

    params: SamplingParams
    lora_name: str | None = None
    # Keep only the last this many prompt tokens; None: the whole prompt.
    truncate_prompt_tokens: int | None = None
    # The client's own "logprobs" (params.logprobs may be 0 for a cumulative logprob alone).
    logprobs_requested: bool = False


def parse_json_object(text: str, field: str) -> dict[str, Any]:
    """Parse ``text`` as a JSON object, naming ``field`` when it is not one."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(field, f"is not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(value, dict):
        raise InvalidRequest(field, f"must be a JSON object, got {type(value).__name__}")
    return value


_ATOMS = {int: "an integer", float: "a number", bool: "a boolean", str: "a string",
          type(None): "null"}


def describe_type(kind: Any) -> str:
    """A field's declared type in words: ``int | None`` -> "an integer or null"."""
    if kind in _ATOMS:
        return _ATOMS[kind]
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe_type(arg) for arg in args)
    if origin is list:
        return f"a list of {describe_type(args[0]).removeprefix('an ').removeprefix('a ')}s"
    if origin is dict:
        return (f"an object of {describe_type(args[0]).removeprefix('an ').removeprefix('a ')}"
                f" to {describe_type(args[1]).removeprefix('an ').removeprefix('a ')}")
    if isinstance(kind, type):
        return f"an object ({kind.__name__})"
    return str(kind)


def _convert(key: str, value: Any, kind: Any) -> Any:
    """``value`` as ``kind``, strings converted as msgspec does outside strict mode; a number
    written with spaces around it is read too."""
    try:
        return msgspec.convert(value, kind, strict=False)
    except msgspec.ValidationError as exc:
        if isinstance(value, str) and value.strip() != value:
            try:
                return msgspec.convert(value.strip(), kind, strict=False)
            except msgspec.ValidationError:
                pass
        # msgspec names the place inside the value ("... - at `$[0]`"); point at the field.
        detail = str(exc).replace("`$", f"`{key}")
        raise InvalidRequest(
            f"sampling_parameters.{key}",
            f"must be {describe_type(kind)}, got {json.dumps(value)} ({detail})",
        ) from None


def _structured_outputs(key: str, value: Any) -> StructuredOutputsParams | None:
    """The stock backend sends structured outputs as a JSON string; an object works too."""
    field = f"sampling_parameters.{key}"
    if value is None:
        return None
    if isinstance(value, str):
        value = parse_json_object(value, field)
    if not isinstance(value, dict):
        raise InvalidRequest(field, f"must be a JSON object (or one as a string), got "
                                    f"{json.dumps(value)}")
    unknown = sorted(set(value) - STRUCTURED_OUTPUT_FIELDS)
    if unknown:
        raise InvalidRequest(f"{field}.{unknown[0]}", "unknown structured-output field "
                             f"(accepted: {', '.join(sorted(STRUCTURED_OUTPUT_FIELDS))})")
    try:
        return msgspec.convert(value, StructuredOutputsParams, strict=False)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(field, str(exc).replace("`$", f"`{key}")) from None
    except (ValueError, VLLMClientError) as exc:
        raise InvalidRequest(field, str(exc).split("\n")[0]) from None


def _unknown(key: str) -> InvalidRequest:
    close = difflib.get_close_matches(key, ACCEPTED_KEYS, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    reason = ("is decided by the backend, not the client" if key in OWNED_FIELDS
              else f"unknown sampling parameter{hint}")
    return InvalidRequest(f"sampling_parameters.{key}",
                          f"{reason} (accepted: {', '.join(sorted(ACCEPTED_KEYS))})")


def parse_sampling(raw: Mapping[str, Any], *, streaming: bool,
                   sampled_logprob: bool = False) -> ClientSampling:
    """Validate ``raw`` and build the vLLM ``SamplingParams`` for it.

    Unknown keys are refused with the closest known names, so a typo never silently falls back to
    a default. Range checks are vLLM's own; its message is passed on with the field named.
    ``sampled_logprob`` has vLLM compute at least the sampled token's logprob (vLLM sums the
    cumulative logprob only while it computes them), changing nothing else.
    """
    kwargs: dict[str, Any] = {}
    lora_name: str | None = None
    truncate: int | None = None
    for key, value in raw.items():
        if key in (STRUCTURED_OUTPUTS, GUIDED_DECODING):
            if STRUCTURED_OUTPUTS in kwargs:
                raise InvalidRequest(f"sampling_parameters.{key}", "structured_outputs and "
                                     "guided_decoding are the same setting: send one")
            kwargs[STRUCTURED_OUTPUTS] = _structured_outputs(key, value)
        elif key == LORA_NAME:
            lora_name = _convert(key, value, str | None)
        elif key == TRUNCATE_PROMPT_TOKENS:
            truncate = _convert(key, value, int | None)
            if truncate is not None and truncate < 1 and truncate != -1:
                raise InvalidRequest(f"sampling_parameters.{key}", "must be a positive number "
                                     f"of tokens (or -1: the model's limit), got {truncate}")
        elif key in _ARRAY_FIELDS:
            rows = _convert(key, value, _ARRAY_FIELDS[key] | None)
            kwargs[key] = None if rows is None else np.asarray(rows, dtype=np.int64)
        elif key in SAMPLING_FIELDS:
            kwargs[key] = _convert(key, value, SAMPLING_FIELDS[key])
        else:
            raise _unknown(key)
    # Deltas keep streaming O(n); a non-streaming request only needs the final output.
    kwargs["output_kind"] = RequestOutputKind.DELTA if streaming else RequestOutputKind.FINAL_ONLY
    requested = kwargs.get("logprobs") is not None
    if sampled_logprob and not requested:
        kwargs["logprobs"] = 0
    try:
        params = SamplingParams(**kwargs)
    except (ValueError, TypeError, VLLMClientError) as exc:
        raise _vllm_refusal(exc, raw) from None
    return ClientSampling(params, lora_name, truncate, requested)


def build_sampling_params(raw: Mapping[str, Any], *, streaming: bool) -> SamplingParams:
    """Only vLLM's parameters (for callers that handle no LoRA and no truncation)."""
    return parse_sampling(raw, streaming=streaming).params


def _vllm_refusal(exc: Exception, raw: Mapping[str, Any]) -> InvalidRequest:
    message = str(exc).split("\n")[0]
    # vLLM's validation errors end with "(parameter=<name>, value=...)"; older messages start
    # with the field name.
    named = re.search(r"\(parameter=(\w+)", message)
    field = named.group(1) if named else next(
        (key for key in raw if message.startswith(key)), None)
    return InvalidRequest(f"sampling_parameters.{field}" if field else "sampling_parameters",
                          message)
