"""OpenAI requests to backend bodies, and backend events back to OpenAI's shapes."""

from __future__ import annotations

import json

import pytest

from gateway.errors import BadRequest
from gateway.openai_translate import (
    backend_event,
    final_response,
    parse_chat,
    parse_completion,
    sse_events,
    stream_chunk,
    usage_chunk,
)


def test_completion_defaults_and_sampling_fields_reach_the_backend() -> None:
    request = parse_completion({"model": "m", "prompt": "Hi", "temperature": 0.5, "seed": 7,
                                "stop": ["\n"], "user": "u1"})
    assert request.parameters == {"temperature": 0.5, "seed": 7, "stop": ["\n"],
                                  "max_tokens": 16}
    body = request.backend_body(0, {**request.parameters, "priority_level": 2})
    assert body["text_input"] == "Hi" and body["stream"] is True
    assert body["return_num_output_tokens"] is True and body["exclude_input_in_output"] is True
    # Triton's HTTP generate takes only scalar request parameters: sampling (a list stop
    # included) goes in the sampling_parameters input, the gateway's own in parameters.
    assert json.loads(body["sampling_parameters"]) == {"temperature": 0.5, "seed": 7,
                                                       "stop": ["\n"], "max_tokens": 16}
    assert body["parameters"] == {"priority_level": 2}
    later = request.backend_body(2, request.parameters)
    assert json.loads(later["sampling_parameters"])["seed"] == 9


def test_chat_messages_go_to_the_backend_as_json_with_the_chat_input_format() -> None:
    messages = [{"role": "user", "content": "Hello"}]
    request = parse_chat({"model": "m", "messages": messages, "max_completion_tokens": 5})
    assert json.loads(request.text_input) == messages
    assert request.parameters["input_format"] == "chat"
    assert request.parameters["max_tokens"] == 5
    assert parse_chat({"model": "m", "messages": messages}).parameters["max_tokens"] == 256


@pytest.mark.parametrize(("body", "message"), [
    ({"prompt": "x"}, "model is required"),
    ({"model": "m", "prompt": [1, 2]}, "prompt must be a string"),
    ({"model": "m", "prompt": "x", "logprobs": 3}, "logprobs=3 is not supported"),
    ({"model": "m", "prompt": "x", "n": 0}, "n must be an integer of at least 1"),
    ({"model": "m", "prompt": "x", "n": 99}, "n must be at most 16"),
    ({"model": "m", "prompt": "x", "temprature": 1}, "does not take temprature"),
    ({"model": "m", "prompt": "x", "stream_options": {"include_usage": True}},
     "only allowed with stream"),
    ({"model": "m", "prompt": "x", "priority": "high"}, "priority must be an integer"),
])
def test_bad_completion_requests_name_the_field(body: dict[str, object], message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        parse_completion(body)


def test_bad_chat_messages_are_refused() -> None:
    with pytest.raises(BadRequest, match="non-empty list"):
        parse_chat({"model": "m", "messages": []})
    with pytest.raises(BadRequest, match=r"messages\[1\]"):
        parse_chat({"model": "m", "messages": [{"role": "user", "content": "a"}, {"x": 1}]})


def test_backend_events_are_read_across_chunk_boundaries() -> None:
    buffer = bytearray()
    first = list(sse_events(buffer, b'data: {"text_output": " Pa'))
    assert first == []
    events = list(sse_events(buffer, b'ris", "finish_reason": ""}\n\ndata: {"text_output": "."'
                                     b', "finish_reason": "length", "num_input_tokens": 5, '
                                     b'"num_output_tokens": 1}\n\n'))
    parsed = [backend_event(e) for e in events]
    assert [e.text for e in parsed] == [" Paris", "."]
    assert parsed[0].finish_reason is None and parsed[1].finish_reason == "length"
    assert parsed[1].input_tokens == 5 and parsed[1].output_tokens == 1


def test_stream_and_final_shapes_follow_openai() -> None:
    chat = parse_chat({"model": "m", "messages": [{"role": "user", "content": "x"}],
                       "stream": True, "stream_options": {"include_usage": True}})
    chunk = stream_chunk(chat, 0, "Hi", None, first=True)
    assert chunk["object"] == "chat.completion.chunk" and chunk["usage"] is None
    assert chunk["choices"][0]["delta"] == {"role": "assistant", "content": "Hi"}
    assert usage_chunk(chat, 3, 4)["usage"] == {"prompt_tokens": 3, "completion_tokens": 4,
                                                "total_tokens": 7}
    completion = parse_completion({"model": "m", "prompt": "x", "n": 2})
    done = final_response(completion, ["a", "b"], ["length", None], 3, 8)
    assert [c["text"] for c in done["choices"]] == ["a", "b"]
    assert [c["finish_reason"] for c in done["choices"]] == ["length", "stop"]
    assert done["id"].startswith("cmpl-") and done["usage"]["total_tokens"] == 11
