"""OpenAI requests to backend bodies, and backend events back to OpenAI's shapes."""

from __future__ import annotations

import json

import pytest

from gateway.errors import BadRequest
from gateway.openai_translate import (
    backend_event,
    final_response,
    merge_logprobs,
    openai_logprobs,
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
    ({"model": "m", "prompt": "x", "echo": True}, "echo=true is not supported"),
    ({"model": "m", "prompt": "x", "logprobs": 21}, "logprobs must be at most 20"),
    ({"model": "m", "prompt": "x", "logprobs": True}, "logprobs must be an integer"),
    ({"model": "m", "prompt": "x", "logit_bias": {"a": 1}}, "logit_bias must map token ids"),
    ({"model": "m", "prompt": "x", "logit_bias": {"5": 101}}, "from -100 to 100"),
    ({"model": "m", "prompt": "x", "response_format": {"type": "xml"}},
     "response_format must be"),
    ({"model": "m", "prompt": "x", "response_format": {"type": "json_schema"}},
     "needs json_schema.schema"),
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


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_chat_logprobs_ask_the_backend_for_top_alternatives() -> None:
    request = parse_chat({**CHAT, "logprobs": True, "top_logprobs": 3})
    body = request.backend_body(0, request.parameters)
    assert json.loads(body["sampling_parameters"])["logprobs"] == 3
    assert body["return_logprobs"] is True
    with pytest.raises(BadRequest, match="top_logprobs needs logprobs: true"):
        parse_chat({**CHAT, "top_logprobs": 2})
    plain = parse_chat({**CHAT, "logprobs": False})
    assert "return_logprobs" not in plain.backend_body(0, plain.parameters)


def test_response_format_and_logit_bias_become_vllm_parameters() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    request = parse_chat({**CHAT, "logit_bias": {"42": -100},
                          "response_format": {"type": "json_schema",
                                              "json_schema": {"name": "x", "schema": schema}}})
    sampling = json.loads(request.backend_body(0, request.parameters)["sampling_parameters"])
    assert sampling["structured_outputs"] == {"json": schema}
    assert sampling["logit_bias"] == {"42": -100.0}
    json_object = parse_completion({"model": "m", "prompt": "x",
                                    "response_format": {"type": "json_object"}})
    assert json_object.parameters["structured_outputs"] == {"json_object": True}
    assert "structured_outputs" not in parse_completion(
        {"model": "m", "prompt": "x", "response_format": {"type": "text"}}).parameters


# Two positions as the backend sends them: the sampled token first, then the top ones by rank.
POSITIONS = [
    {"11": {"logprob": -0.5, "rank": 1, "decoded_token": " Paris"},
     "12": {"logprob": -1.5, "rank": 2, "decoded_token": " Lyon"}},
    {"13": {"logprob": -2.0, "rank": 3, "decoded_token": "."},
     "14": {"logprob": -0.2, "rank": 1, "decoded_token": ","},
     "15": {"logprob": -1.9, "rank": 2, "decoded_token": "!"}},
]


def test_chat_logprobs_in_openais_shape() -> None:
    request = parse_chat({**CHAT, "logprobs": True, "top_logprobs": 2})
    content = openai_logprobs(request, POSITIONS)["content"]
    assert [c["token"] for c in content] == [" Paris", "."]
    assert content[1]["logprob"] == -2.0 and content[1]["bytes"] == [46]
    assert [t["token"] for t in content[1]["top_logprobs"]] == [",", "!"]
    none_asked = parse_chat({**CHAT, "logprobs": True})
    assert openai_logprobs(none_asked, POSITIONS)["content"][0]["top_logprobs"] == []
    assert openai_logprobs(parse_chat(CHAT), POSITIONS) is None


def test_completion_logprobs_in_openais_shape_with_offsets() -> None:
    request = parse_completion({"model": "m", "prompt": "x", "logprobs": 1})
    first = openai_logprobs(request, POSITIONS[:1], text_offset=0)
    rest = openai_logprobs(request, POSITIONS[1:], text_offset=len(" Paris"))
    merged = merge_logprobs(request, first, rest)
    assert merged == {"tokens": [" Paris", "."], "token_logprobs": [-0.5, -2.0],
                      "top_logprobs": [{" Paris": -0.5}, {",": -0.2}], "text_offset": [0, 6]}
