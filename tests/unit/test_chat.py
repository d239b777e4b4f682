"""Unit tests for llm_backend.chat: input_format and the messages of a chat request."""

from __future__ import annotations

import json

import pytest

from llm_backend.chat import ChatMessage, InputFormat, parse_input_format, parse_messages
from llm_backend.errors import InvalidRequest


@pytest.mark.parametrize(("value", "expected"),
                         [(None, InputFormat.TEXT), ("text", InputFormat.TEXT),
                          ("chat", InputFormat.CHAT)])
def test_input_format(value, expected):
    assert parse_input_format(value) is expected


@pytest.mark.parametrize(("value", "hint"), [("Chat", "did you mean 'chat'?"),
                                             ("txt", "did you mean 'text'?"), ("messages", ""),
                                             (1, ""), (["chat"], "")])
def test_unknown_input_format(value, hint):
    with pytest.raises(InvalidRequest) as info:
        parse_input_format(value)
    assert info.value.field == "input_format"
    assert f"must be one of 'text', 'chat', got {value!r}" in info.value.message
    assert hint in info.value.message


def test_messages_in_order():
    text = json.dumps([{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": "Hi"},
                       {"role": "assistant", "content": "Hello!"},
                       {"role": "user", "content": "Capital of France?"}])
    assert parse_messages(text) == (
        ChatMessage("system", "Be brief."), ChatMessage("user", "Hi"),
        ChatMessage("assistant", "Hello!"), ChatMessage("user", "Capital of France?"),
    )


def test_text_parts_are_joined_as_vllm_does():
    text = json.dumps([{"role": "user", "content": [{"type": "text", "text": "one"},
                                                    {"type": "text", "text": "two"}]}])
    (message,) = parse_messages(text)
    assert message.content == "one\ntwo"
    assert message.as_dict() == {"role": "user", "content": "one\ntwo"}


def test_empty_content_is_allowed():
    assert parse_messages('[{"role": "user", "content": ""}]') == (ChatMessage("user", ""),)
    assert parse_messages('[{"role": "user", "content": []}]') == (ChatMessage("user", ""),)


@pytest.mark.parametrize(("text", "field", "fragment"), [
    ("Hello", "text_input", "it is not valid JSON"),
    ('[{"role": "user"', "text_input", "it is not valid JSON"),
    ("[]", "text_input", "non-empty JSON array of messages"),
    ('{"role": "user", "content": "Hi"}', "text_input", "got a JSON object"),
    ('"Hi"', "text_input", "got a JSON string"),
    ("null", "text_input", "got a JSON null"),
    ('["Hi"]', "text_input[0]", "must be an object with 'role' and 'content'"),
    ('[{"content": "Hi"}]', "text_input[0]", "has no 'role'"),
    ('[{"role": "user"}]', "text_input[0]", "has no 'content'"),
    ("[{}]", "text_input[0]", "has no 'role' or 'content'"),
    ('[{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]', "text_input[1].role",
     'must be one of system, user, assistant, got "tool"'),
    ('[{"role": null, "content": "b"}]', "text_input[0].role", "got null"),
    ('[{"role": "user", "content": 5}]', "text_input[0].content", "got a JSON number"),
    ('[{"role": "user", "content": null}]', "text_input[0].content", "got a JSON null"),
    ('[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]',
     "text_input[0].content[0]", "only text is supported"),
    ('[{"role": "user", "content": [{"type": "text"}]}]', "text_input[0].content[0]",
     "must be a text part"),
    ('[{"role": "user", "content": ["Hi"]}]', "text_input[0].content[0]", "must be a text part"),
    ('[{"role": "user", "content": "Hi", "name": "bob"}]', "text_input[0]",
     "unsupported keys ['name']"),
])
def test_invalid_messages_name_the_field(text, field, fragment):
    with pytest.raises(InvalidRequest) as info:
        parse_messages(text)
    assert info.value.field == field
    assert fragment in info.value.message
    assert info.value.message.startswith(f"{field}: ")


def test_not_json_says_what_chat_input_must_be():
    with pytest.raises(InvalidRequest) as info:
        parse_messages("The capital of France is")
    assert "with input_format 'chat' must be a JSON array of messages" in info.value.message
