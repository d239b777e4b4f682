"""OpenAI's completions and chat completions, translated to and from the backend's generate
request and its streamed events. Pure: no web framework, no I/O."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import BadRequest
from gateway.lora import LORA_NAME
from gateway.routing.table import ADAPTER_SEPARATOR, Route, Tenant

# OpenAI leaves max_tokens open for chat; the engine's own default would be 16 tokens.
CHAT_DEFAULT_MAX_TOKENS = 256
COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's documented default for /v1/completions
MAX_CHOICES = 16
# vLLM's default max_logprobs: the most alternatives per token an engine computes.
MAX_TOP_LOGPROBS = 20

# Sampling fields passed to the backend as they are.
SAMPLING = ("temperature", "top_p", "seed", "stop", "presence_penalty", "frequency_penalty")
# Sampling keys the translation writes (OpenAI's names mapped to vLLM's, see _common), and the
# adapter a model name ``M:<adapter>`` selects.
SAMPLING_KEYS = frozenset({*SAMPLING, "max_tokens", "logprobs", "logit_bias",
                           "structured_outputs", LORA_NAME})
COMMON = frozenset({"model", "stream", "stream_options", "n", "max_tokens", "user", "priority",
                    "logit_bias", "response_format", "logprobs", *SAMPLING})
# Accepted only at their neutral value: anything else needs what the backend does not do yet.
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "echo": (None, False), "best_of": (None, 1), "suffix": (None, ""), "tools": (None, []),
    "tool_choice": (None, "none"), "functions": (None, []), "parallel_tool_calls": (None,),
}
COMPLETION_FIELDS = COMMON | {"prompt"} | NEUTRAL.keys()
CHAT_FIELDS = COMMON | {"messages", "max_completion_tokens", "top_logprobs"} | NEUTRAL.keys()
FINISH_REASONS = {"stop": "stop", "length": "length", "abort": "stop"}


@dataclass(frozen=True)
class OpenAIRequest:
    """One validated request: what to send the backend, and how to answer."""

    chat: bool
    model: str
    text_input: str
    parameters: dict[str, Any]
    n: int
    stream: bool
    include_usage: bool
    priority: int | None
    # Alternatives per token the client wants with each token's logprob; None: no logprobs.
    top_logprobs: int | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def response_id(self) -> str:
        return f"{'chatcmpl' if self.chat else 'cmpl'}-{self.id}"

    def backend_body(self, index: int, parameters: dict[str, Any]) -> dict[str, Any]:
        """The generate_stream body for choice ``index`` (each choice is its own request, so
        the backend's per-sequence outputs stay simple; a seed moves by the choice's index).

        Sampling goes in the ``sampling_parameters`` input: Triton's HTTP generate takes only
        scalars as request parameters, and ``stop`` may be a list."""
        sampling = {key: value for key, value in parameters.items() if key in SAMPLING_KEYS}
        if index and sampling.get("seed") is not None:
            sampling["seed"] = sampling["seed"] + index
        others = {key: value for key, value in parameters.items() if key not in SAMPLING_KEYS}
        body = {"text_input": self.text_input, "stream": True, "exclude_input_in_output": True,
                "return_finish_reason": True, "return_num_input_tokens": True,
                "return_num_output_tokens": True, "sampling_parameters": json.dumps(sampling),
                "parameters": others}
        if self.top_logprobs is not None:
            body["return_logprobs"] = True
        return body


def model_list(routes: Iterable[Route], tenant: Tenant) -> dict[str, Any]:
    """``GET /v1/models``: each served name the tenant may use, and ``<name>:<adapter>`` for
    each adapter loaded on one of its nodes (``parent``: the base, as vLLM lists adapters)."""
    data: list[dict[str, Any]] = []
    for route in sorted(routes, key=lambda r: r.name):
        if not tenant.may_use(route):
            continue
        data.append({"id": route.name, "object": "model", "created": 0, "owned_by": route.model})
        data.extend({"id": f"{route.name}{ADAPTER_SEPARATOR}{adapter}", "object": "model",
                     "created": 0, "owned_by": route.model, "parent": route.name}
                    for adapter in route.adapters())
    return {"object": "list", "data": data}


def _check_fields(body: dict[str, Any], allowed: frozenset[str], endpoint: str) -> None:
    unknown = sorted(body.keys() - allowed)
    if unknown:
        raise BadRequest(f"{endpoint} does not take {', '.join(unknown)} (accepted: "
                         f"{', '.join(sorted(allowed))})")
    for name, neutral in NEUTRAL.items():
        if name in body and body[name] not in neutral:
            raise BadRequest(f"{name}={json.dumps(body[name])} is not supported by this backend "
                             "yet; leave it out")


def _int(body: dict[str, Any], name: str, default: int | None, low: int) -> int | None:
    value = body.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise BadRequest(f"{name} must be an integer of at least {low}, got {json.dumps(value)}")
    return value


def _top_logprobs(body: dict[str, Any], chat: bool) -> int | None:
    """How many alternatives per token: chat says ``logprobs: true`` + ``top_logprobs: k``,
    completions ``logprobs: k``."""
    if chat:
        wanted = body.get("logprobs")
        if wanted not in (None, True, False):
            raise BadRequest(f"logprobs must be true or false, got {json.dumps(wanted)}")
        top = _int(body, "top_logprobs", None, 0)
        if top is not None and not wanted:
            raise BadRequest("top_logprobs needs logprobs: true")
        if not wanted:
            return None
        top = top or 0
    else:
        top = _int(body, "logprobs", None, 0)
        if top is None:
            return None
    if top > MAX_TOP_LOGPROBS:
        name = "top_logprobs" if chat else "logprobs"
        raise BadRequest(f"{name} must be at most {MAX_TOP_LOGPROBS}, got {top}")
    return top


def _structured_outputs(body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's ``response_format`` as vLLM's structured outputs."""
    spec = body.get("response_format")
    if spec is None:
        return None
    kind = spec.get("type") if isinstance(spec, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"json_object": True}
    if kind == "json_schema":
        schema = spec.get("json_schema")
        if not isinstance(schema, dict) or not isinstance(schema.get("schema"), dict):
            raise BadRequest("response_format json_schema needs json_schema.schema, a JSON "
                             "Schema object")
        return {"json": schema["schema"]}
    raise BadRequest("response_format must be {\"type\": \"text\"}, {\"type\": "
                     "\"json_object\"} or {\"type\": \"json_schema\", \"json_schema\": "
                     f"{{\"schema\": ...}}}}, got {json.dumps(spec)}")


def _logit_bias(body: dict[str, Any]) -> dict[str, float] | None:
    bias = body.get("logit_bias")
    if bias is None or bias == {}:
        return None
    if not isinstance(bias, dict) or not all(
            str(token).isdigit() and isinstance(value, (int, float)) and
            not isinstance(value, bool) and -100 <= value <= 100
            for token, value in bias.items()):
        raise BadRequest("logit_bias must map token ids to numbers from -100 to 100, got "
                         f"{json.dumps(bias)}")
    return {str(token): float(value) for token, value in bias.items()}


def _common(body: dict[str, Any], chat: bool) -> dict[str, Any]:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("model is required (a name from GET /v1/models)")
    n = _int(body, "n", 1, 1)
    assert n is not None
    if n > MAX_CHOICES:
        raise BadRequest(f"n must be at most {MAX_CHOICES}, got {n}")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("stream must be true or false")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict) or options.keys() - {"include_usage"}:
        raise BadRequest("stream_options takes only include_usage")
    if options and not stream:
        raise BadRequest("stream_options is only allowed with stream: true")
    default_max = CHAT_DEFAULT_MAX_TOKENS if chat else COMPLETION_DEFAULT_MAX_TOKENS
    max_tokens = _int(body, "max_completion_tokens" if chat and "max_completion_tokens" in body
                      else "max_tokens", default_max, 1)
    parameters: dict[str, Any] = {key: body[key] for key in SAMPLING if body.get(key) is not None}
    parameters["max_tokens"] = max_tokens
    top_logprobs = _top_logprobs(body, chat)
    if top_logprobs is not None:
        parameters["logprobs"] = top_logprobs
    extras = {"logit_bias": _logit_bias(body), "structured_outputs": _structured_outputs(body)}
    parameters.update({key: value for key, value in extras.items() if value is not None})
    priority = body.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise BadRequest(f"priority must be an integer level (1 is the most urgent), got "
                         f"{json.dumps(priority)}")
    return {"model": model, "n": n, "stream": stream,
            "include_usage": bool(options.get("include_usage")), "parameters": parameters,
            "priority": priority, "top_logprobs": top_logprobs}


def parse_completion(body: dict[str, Any]) -> OpenAIRequest:
    _check_fields(body, COMPLETION_FIELDS, "/v1/completions")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise BadRequest("prompt must be a string (one prompt per request; token arrays are "
                         "not supported)")
    return OpenAIRequest(chat=False, text_input=prompt, **_common(body, chat=False))


def parse_chat(body: dict[str, Any]) -> OpenAIRequest:
    _check_fields(body, CHAT_FIELDS, "/v1/chat/completions")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list of {role, content}")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise BadRequest(f"messages[{index}] must be an object with role and content")
    common = _common(body, chat=True)
    common["parameters"]["input_format"] = "chat"
    # The backend renders the messages with the model's own chat template.
    return OpenAIRequest(chat=True, text_input=json.dumps(messages), **common)


@dataclass
class BackendEvent:
    text: str
    finish_reason: str | None
    input_tokens: int
    output_tokens: int
    # The new tokens' logprobs in the backend's (the stock backend's) shape, when asked for.
    logprobs: list[dict[str, dict[str, Any]]] | None = None


def _first(value: Any, default: Any) -> Any:
    if isinstance(value, list):
        return value[0] if value else default
    return default if value is None else value


def backend_event(document: dict[str, Any]) -> BackendEvent:
    """One event of the backend's generate_stream (shape-[1] tensors arrive as scalars)."""
    reason = _first(document.get("finish_reason"), "") or None
    logprobs = _first(document.get("logprobs"), None)
    return BackendEvent(text=_first(document.get("text_output"), ""),
                        finish_reason=FINISH_REASONS.get(reason, reason) if reason else None,
                        input_tokens=int(_first(document.get("num_input_tokens"), 0)),
                        output_tokens=int(_first(document.get("num_output_tokens"), 0)),
                        logprobs=json.loads(logprobs) if isinstance(logprobs, str) else None)


def _ranked(position: dict[str, dict[str, Any]], top: int) -> tuple[dict[str, Any],
                                                                     list[dict[str, Any]]]:
    """The sampled token (the backend lists it first, as vLLM does) and the ``top`` most
    likely, best first."""
    entries = list(position.values())
    best = sorted((entry for entry in entries if entry["rank"] <= top),
                  key=lambda entry: entry["rank"])
    return entries[0], best


def _token(entry: dict[str, Any]) -> dict[str, Any]:
    token = entry["decoded_token"] or ""
    return {"token": token, "logprob": entry["logprob"], "bytes": list(token.encode())}


def openai_logprobs(request: OpenAIRequest, positions: list[dict[str, dict[str, Any]]] | None,
                    text_offset: int = 0) -> dict[str, Any] | None:
    """The backend's logprobs in OpenAI's shape: chat's ``content`` list, or completions'
    parallel ``tokens``/``token_logprobs``/``top_logprobs``/``text_offset`` lists."""
    if request.top_logprobs is None or positions is None:
        return None
    top = request.top_logprobs
    if request.chat:
        content = []
        for position in positions:
            sampled, best = _ranked(position, top)
            content.append({**_token(sampled), "top_logprobs": [_token(e) for e in best]})
        return {"content": content, "refusal": None}
    result: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                                    "text_offset": []}
    for position in positions:
        sampled, best = _ranked(position, top)
        token = sampled["decoded_token"] or ""
        result["tokens"].append(token)
        result["token_logprobs"].append(sampled["logprob"])
        result["top_logprobs"].append({e["decoded_token"] or "": e["logprob"] for e in best})
        result["text_offset"].append(text_offset)
        text_offset += len(token)
    return result


def merge_logprobs(request: OpenAIRequest, whole: dict[str, Any] | None,
                   part: dict[str, Any] | None) -> dict[str, Any] | None:
    """One choice's logprobs over every event of a non-streaming answer."""
    if part is None:
        return whole
    if whole is None:
        return part
    for key, values in part.items():
        if isinstance(values, list):
            whole[key].extend(values)
    return whole


def sse_events(buffer: bytearray, chunk: bytes) -> Iterator[dict[str, Any]]:
    """Complete ``data:`` events in ``buffer`` after adding ``chunk``; keeps the partial rest."""
    buffer.extend(chunk)
    while True:
        end = buffer.find(b"\n\n")
        if end < 0:
            return
        event = bytes(buffer[:end])
        del buffer[: end + 2]
        for line in event.splitlines():
            if line.startswith(b"data: "):
                yield json.loads(line[len(b"data: "):])


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def stream_chunk(request: OpenAIRequest, index: int, text: str | None,
                 finish_reason: str | None, first: bool = False,
                 logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    if request.chat:
        delta: dict[str, Any] = {}
        if first:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        choice: dict[str, Any] = {"index": index, "delta": delta, "logprobs": logprobs,
                                  "finish_reason": finish_reason}
        kind = "chat.completion.chunk"
    else:
        choice = {"index": index, "text": text or "", "logprobs": logprobs,
                  "finish_reason": finish_reason}
        kind = "text_completion"
    chunk: dict[str, Any] = {"id": request.response_id, "object": kind,
                             "created": request.created, "model": request.model,
                             "choices": [choice]}
    if request.include_usage:
        chunk["usage"] = None
    return chunk


def usage_chunk(request: OpenAIRequest, prompt_tokens: int, completion_tokens: int
                ) -> dict[str, Any]:
    return {"id": request.response_id,
            "object": "chat.completion.chunk" if request.chat else "text_completion",
            "created": request.created, "model": request.model, "choices": [],
            "usage": usage(prompt_tokens, completion_tokens)}


def final_response(request: OpenAIRequest, texts: list[str], reasons: list[str | None],
                   prompt_tokens: int, completion_tokens: int,
                   logprobs: list[dict[str, Any] | None] | None = None) -> dict[str, Any]:
    choices: list[dict[str, Any]] = []
    logprobs = logprobs or [None] * len(texts)
    for index, (text, reason, lps) in enumerate(zip(texts, reasons, logprobs, strict=True)):
        if request.chat:
            choices.append({"index": index, "message": {"role": "assistant", "content": text},
                            "logprobs": lps, "finish_reason": reason or "stop"})
        else:
            choices.append({"index": index, "text": text, "logprobs": lps,
                            "finish_reason": reason or "stop"})
    return {"id": request.response_id,
            "object": "chat.completion" if request.chat else "text_completion",
            "created": request.created, "model": request.model, "choices": choices,
            "usage": usage(prompt_tokens, completion_tokens)}
