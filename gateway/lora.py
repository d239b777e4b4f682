"""The LoRA adapter a served name ``M:<adapter>`` selects, as the backend reads it: ``lora_name``
in the ``sampling_parameters`` input's JSON when the request has that input, in the request
parameters when it has not (the backend then reads sampling keys from them, as the stock vLLM
backend does). Pure, shared by every protocol."""

from __future__ import annotations

import json
from typing import Any

from gateway.errors import BadRequest

LORA_NAME = "lora_name"
SAMPLING_INPUT = "sampling_parameters"


def check_lora_name(given: Any, adapter: str, field: str) -> None:
    """Refuse a ``lora_name`` the client sent that is not the adapter its model name selects."""
    if given is not None and given != adapter:
        raise BadRequest(f"{field} is {json.dumps(given)} but the model name selects adapter "
                         f"'{adapter}'; send the adapter in one place (the model name "
                         "'<model>:<adapter>', or lora_name on the base model)")


def with_lora_name(values: dict[str, Any], adapter: str, field: str) -> dict[str, Any]:
    """``values`` (request or sampling parameters) with ``lora_name`` set to ``adapter``."""
    check_lora_name(values.get(LORA_NAME), adapter, f"{field}.{LORA_NAME}")
    return {**values, LORA_NAME: adapter}


def sampling_json_with_lora_name(text: str, adapter: str) -> str:
    """The ``sampling_parameters`` input's JSON text with ``lora_name`` set to ``adapter``."""
    try:
        sampling = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise BadRequest(f"{SAMPLING_INPUT} is not valid JSON ({exc}); send a JSON object "
                         "string") from None
    if not isinstance(sampling, dict):
        raise BadRequest(f"{SAMPLING_INPUT} must be a JSON object string, got "
                         f"{type(sampling).__name__}")
    return json.dumps(with_lora_name(sampling, adapter, SAMPLING_INPUT))


def generate_document_with_lora_name(document: dict[str, Any], adapter: str) -> dict[str, Any]:
    """A KServe HTTP generate body (its ``parameters`` already decided) with the adapter where
    the backend reads it. A ``lora_name`` the client put in either place must agree with it."""
    parameters: dict[str, Any] = document.get("parameters", {})
    if SAMPLING_INPUT not in document:
        return {**document, "parameters": with_lora_name(parameters, adapter, "parameters")}
    check_lora_name(parameters.get(LORA_NAME), adapter, f"parameters.{LORA_NAME}")
    value = document[SAMPLING_INPUT]
    # A BYTES input of one element: a string, or tritonclient's list of one string.
    if isinstance(value, str):
        return {**document, SAMPLING_INPUT: sampling_json_with_lora_name(value, adapter)}
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        return {**document, SAMPLING_INPUT: [sampling_json_with_lora_name(value[0], adapter)]}
    raise BadRequest(f"{SAMPLING_INPUT} must be a JSON object string (one), got "
                     f"{json.dumps(value)[:100]}")
