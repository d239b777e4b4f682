"""Parse what a client sent (Triton tensors and request parameters, already unpacked) into one
validated ``GenerationRequest``. Knows nothing of Triton's types, so it tests anywhere."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm import SamplingParams

from llm_backend.chat import (
    INPUT_FORMAT_PARAMETER,
    ChatMessage,
    InputFormat,
    parse_input_format,
    parse_messages,
)
from llm_backend.errors import InvalidRequest
from llm_backend.gateway_trust import GATEWAY_PARAMETERS, GatewayTrust
from llm_backend.priority import PriorityLevels
from llm_backend.sampling import parse_json_object, parse_sampling

# The priority a client asks for. Over HTTP generate, ``parameters.priority`` arrives as a plain
# request parameter; over gRPC, Triton consumes ``priority`` itself (and tritonclient refuses it
# as a parameter name) without showing it to a Python backend, so gRPC clients send
# ``priority_level``. Either name works on either protocol.
PRIORITY_PARAMETERS = ("priority", "priority_level")
# The queue timeout a request may ask for, in microseconds (Triton's own name and unit).
TIMEOUT_PARAMETER = "timeout"
# Request parameters that are not sampling parameters; "id" is the request id, which Triton's
# HTTP generate endpoint also copies into the parameters. The gateway adds the tenant and its
# secret (gateway_trust.py).
NON_SAMPLING_PARAMETERS = frozenset({
    *PRIORITY_PARAMETERS, TIMEOUT_PARAMETER, "id", INPUT_FORMAT_PARAMETER, *GATEWAY_PARAMETERS,
})
# A node without a gateway: no request may name a tenant.
NO_GATEWAY = GatewayTrust()


@dataclass(frozen=True)
class RawRequest:
    """A request as received: optional inputs are None when the client did not send them."""

    text_input: bytes | str | None
    stream: bool | None = None
    sampling_parameters: bytes | str | None = None
    exclude_input_in_output: bool | None = None
    return_finish_reason: bool | None = None
    return_num_input_tokens: bool | None = None
    return_num_output_tokens: bool | None = None
    return_logprobs: bool | None = None
    return_cumulative_logprob: bool | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    # Triton's per-request timeout (gRPC ``timeout``), microseconds; 0 or None when not set.
    timeout_us: int | None = None


@dataclass(frozen=True)
class GenerationRequest:
    """A validated request, ready for admission and the engine."""

    prompt: str
    streaming: bool
    sampling: SamplingParams
    include_prompt_in_output: bool
    return_finish_reason: bool
    return_num_input_tokens: bool
    return_num_output_tokens: bool
    priority: int
    priority_from_client: bool
    # How long the request may wait for an engine slot; None: the level's default.
    queue_timeout_s: float | None = None
    # input_format "chat": the messages, and ``prompt`` is empty until the model's chat template
    # renders them (EngineHost.render_chat, with the tokenizer the engine holds).
    messages: tuple[ChatMessage, ...] | None = None
    # Who the request is for, as the gateway vouched; None: not sent through a gateway.
    tenant: str | None = None
    # The tenant's fair-share weight inside a priority level (fair_share.py).
    tenant_weight: float = 1.0
    # The stock backend's optional outputs: per-token logprobs (JSON) and their running sum.
    return_logprobs: bool = False
    return_cumulative_logprob: bool = False
    # Whether the client's sampling parameters asked for logprobs (else the output says null).
    logprobs_requested: bool = False
    # Keep only the last this many prompt tokens (-1: as many as the model takes).
    truncate_prompt_tokens: int | None = None
    # The LoRA adapter the request asks for (stock's ``lora_name``).
    lora_name: str | None = None


def _text(value: bytes | str, field_name: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidRequest(field_name, f"is not valid UTF-8 ({exc.reason})") from None
    return value


def parse_parameters_json(text: str | None) -> dict[str, Any]:
    """Triton hands request parameters over as a JSON object string."""
    if not text:
        return {}
    return parse_json_object(text, "parameters")


def parse_request(raw: RawRequest, levels: PriorityLevels,
                  gateway: GatewayTrust = NO_GATEWAY) -> GenerationRequest:
    """Validate a raw request; every problem raises ``InvalidRequest`` naming its field.

    ``gateway`` decides whether a ``tenant`` parameter is trusted; by default none is.
    """
    tenant = gateway.tenant(raw.parameters)
    if raw.text_input is None:
        raise InvalidRequest("text_input", "is required")
    prompt = _text(raw.text_input, "text_input")
    messages = None
    if parse_input_format(raw.parameters.get(INPUT_FORMAT_PARAMETER)) is InputFormat.CHAT:
        messages = parse_messages(prompt)
        prompt = ""
    streaming = bool(raw.stream)

    if raw.sampling_parameters is not None:
        text = _text(raw.sampling_parameters, "sampling_parameters")
        sampling_raw = parse_json_object(text, "sampling_parameters") if text.strip() else {}
    else:
        # Like the stock vLLM backend: without the input, sampling parameters may come as
        # request parameters (HTTP generate's "parameters": {"temperature": 0, ...}).
        sampling_raw = {
            key: value
            for key, value in raw.parameters.items()
            if key not in NON_SAMPLING_PARAMETERS
        }
    # A cumulative logprob needs vLLM to compute the sampled token's logprob; the logprobs
    # output still says null when the client asked for none, as the stock one does.
    client_sampling = parse_sampling(sampling_raw, streaming=streaming,
                                     sampled_logprob=bool(raw.return_cumulative_logprob))
    sampling = client_sampling.params
    logprobs_requested = client_sampling.logprobs_requested

    priority, priority_from_client = _priority(raw.parameters, levels)
    # The stock backend includes the prompt in non-streaming output unless told not to; a stream
    # carries only the new text unless the client asks for the prompt explicitly. Chat input is
    # JSON, not text to continue: its rendered prompt is echoed only when asked for.
    if raw.exclude_input_in_output is None:
        include_prompt = not streaming and messages is None
    else:
        include_prompt = not raw.exclude_input_in_output
    return GenerationRequest(
        prompt=prompt,
        streaming=streaming,
        sampling=sampling,
        include_prompt_in_output=include_prompt,
        return_finish_reason=bool(raw.return_finish_reason),
        return_num_input_tokens=bool(raw.return_num_input_tokens),
        return_num_output_tokens=bool(raw.return_num_output_tokens),
        priority=priority,
        priority_from_client=priority_from_client,
        queue_timeout_s=_queue_timeout(raw),
        messages=messages,
        tenant=tenant,
        tenant_weight=gateway.weight(raw.parameters, tenant),
        return_logprobs=bool(raw.return_logprobs),
        return_cumulative_logprob=bool(raw.return_cumulative_logprob),
        logprobs_requested=logprobs_requested,
        truncate_prompt_tokens=client_sampling.truncate_prompt_tokens,
        lora_name=client_sampling.lora_name,
    )


def _priority(parameters: dict[str, Any], levels: PriorityLevels) -> tuple[int, bool]:
    """(level, whether the client named one); both names may be given if they agree."""
    named = {name: levels.resolve(parameters[name]) for name in PRIORITY_PARAMETERS
             if parameters.get(name) is not None}
    if len(set(named.values())) > 1:
        raise InvalidRequest("priority", f"priority and priority_level disagree: {named}")
    if not named:
        return levels.default, False
    return next(iter(named.values())), True


def _queue_timeout(raw: RawRequest) -> float | None:
    """Triton's request timeout if set, else a ``timeout`` parameter (HTTP), in seconds."""
    if raw.timeout_us:
        return raw.timeout_us / 1e6
    value = raw.parameters.get(TIMEOUT_PARAMETER)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidRequest(
            "timeout", f"must be a non-negative integer number of microseconds, got {value!r}"
        )
    return value / 1e6 if value else None
