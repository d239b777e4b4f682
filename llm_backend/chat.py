"""Chat input: ``text_input`` as a JSON array of OpenAI-style messages, rendered into a prompt by
the model's own chat template (``EngineHost.render_chat``). Parsing is pure and tests anywhere."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

from llm_backend.errors import InvalidRequest

INPUT_FORMAT_PARAMETER = "input_format"
ROLES = ("system", "user", "assistant")
MESSAGE_KEYS = frozenset({"role", "content"})


class InputFormat(Enum):
    """How ``text_input`` is read: the prompt itself, or messages for the chat template."""

    TEXT = "text"
    CHAT = "chat"


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


def parse_input_format(value: Any) -> InputFormat:
    """The request parameter's value; absent means text, as the stock backend reads it."""
    if value is None:
        return InputFormat.TEXT
    accepted = [f.value for f in InputFormat]
    if isinstance(value, str) and value in accepted:
        return InputFormat(value)
    close = difflib.get_close_matches(str(value).lower(), accepted, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise InvalidRequest(
        INPUT_FORMAT_PARAMETER,
        f"must be one of {', '.join(repr(a) for a in accepted)}, got {value!r}{hint}",
    )


def parse_messages(text: str) -> tuple[ChatMessage, ...]:
    """Validate ``text_input`` for ``input_format: chat``; content parts become one string."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(
            "text_input",
            f"with input_format 'chat' must be a JSON array of messages; it is not valid JSON "
            f"({exc.msg} at position {exc.pos})",
        ) from None
    if not isinstance(value, list) or not value:
        got = "an empty array" if value == [] else f"a JSON {_json_type(value)}"
        raise InvalidRequest(
            "text_input",
            f"with input_format 'chat' must be a non-empty JSON array of messages like "
            f'[{{"role": "user", "content": "Hello"}}], got {got}',
        )
    return tuple(_message(index, item) for index, item in enumerate(value))


def _message(index: int, item: Any) -> ChatMessage:
    where = f"text_input[{index}]"
    if not isinstance(item, dict):
        raise InvalidRequest(
            where, f"must be an object with 'role' and 'content', got a JSON {_json_type(item)}"
        )
    missing = [key for key in ("role", "content") if key not in item]
    if missing:
        raise InvalidRequest(
            where, f"has no {' or '.join(repr(m) for m in missing)}; every message needs both"
        )
    unknown = sorted(set(item) - MESSAGE_KEYS)
    if unknown:
        raise InvalidRequest(
            where, f"has unsupported keys {unknown}; a message holds only 'role' and 'content'"
        )
    role = item["role"]
    if role not in ROLES:
        raise InvalidRequest(
            f"{where}.role", f"must be one of {', '.join(ROLES)}, got {json.dumps(role)}"
        )
    return ChatMessage(role=role, content=_content(f"{where}.content", item["content"]))


def _content(where: str, content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(
            where,
            f"must be a string or a list of text parts, got a JSON {_json_type(content)}",
        )
    texts = []
    for index, part in enumerate(content):
        if (not isinstance(part, dict) or part.get("type") != "text"
                or not isinstance(part.get("text"), str)):
            raise InvalidRequest(
                f"{where}[{index}]",
                f'must be a text part {{"type": "text", "text": "..."}} (only text is '
                f"supported), got {json.dumps(part)[:80]}",
            )
        texts.append(part["text"])
    # As vLLM's OpenAI server flattens parts for templates that expect a string.
    return "\n".join(texts)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
