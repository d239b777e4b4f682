"""A prompt's tokens counted as the backend counts them, for reserving a request against its
tenant's token limits.

Per (model, version) the gateway fetches the version's tokenizer files from the control plane
(``GET /api/v1/models/{m}/versions/{n}/tokenizer``) once, builds a ``tokenizers.Tokenizer`` and
the chat template from them, and keeps the most recently used few. A text prompt counts as the
backend's ``tokenizer.encode(prompt, add_special_tokens=True)``; chat messages are rendered with
the model's template as transformers renders it (``add_generation_prompt``) and encoded without
special tokens, which the template writes itself. A truncated prompt counts what the backend
keeps of it.

What cannot be counted so (no tokenizer to fetch, a fetch that failed, a template that refuses
the messages) is reserved by the caller at the byte bound, said once per version in the log and
per request in ``llmgw_prompt_token_fallbacks_total{reason}``. A failed fetch is tried again
after a back-off, not by every request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, NoReturn

import httpx
from jinja2 import TemplateError, nodes
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.runtime import Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment
from prometheus_client import Counter
from tokenizers import Tokenizer

from gateway.routing.table import Route
from llm_backend.chat import INPUT_FORMAT_PARAMETER, InputFormat, parse_messages
from llm_backend.errors import InvalidRequest

log = logging.getLogger("gateway.prompt_tokens")
# Longer prompts are tokenized in a worker thread: ~1 ms of tokenizing here would hold up every
# other request on the event loop.
INLINE_BYTES = 8 * 1024
# How long a request waits for its version's first fetch before it is reserved by bytes (the
# fetch goes on for the next request).
FETCH_WAIT_S = 10.0
RETRY_MIN_S = 10.0
RETRY_MAX_S = 600.0
TRUNCATE_TO_MODEL_LIMIT = -1
# The request parameter that says text_input holds chat messages.
INPUT_FORMAT = INPUT_FORMAT_PARAMETER

# Why a prompt was reserved by bytes (the metric's reason label).
NO_TOKENIZER = "no_tokenizer"  # the control plane has none for this version (it says why)
FETCH_FAILED = "fetch_failed"  # the control plane did not answer with one
FETCHING = "fetching"  # the first fetch took longer than FETCH_WAIT_S
INVALID_TOKENIZER = "invalid_tokenizer"  # the files do not make a tokenizer
# No chat template, or no prompt from it: it refused the messages, or the backend will.
CHAT_TEMPLATE = "chat_template"


def is_chat(input_format: Any) -> bool:
    """Whether a request's ``input_format`` parameter makes its text_input chat messages."""
    return input_format == InputFormat.CHAT.value


@dataclass(frozen=True)
class Prompt:
    """A request's prompt as the backend reads it."""

    # text_input (chat: the messages as JSON); None when it is not one string, which the
    # backend refuses: the byte bound reserves it until then.
    text: str | None
    size: int  # its bytes
    chat: bool = False
    # truncate_prompt_tokens: the backend keeps the last this many tokens (-1: the model's limit).
    truncate: int | None = None

    def kept(self, tokens: int, max_model_len: int | None) -> int:
        """How many of ``tokens`` the backend keeps after truncation (a value it refuses
        truncates nothing: the request is refused before it is counted)."""
        if self.truncate == TRUNCATE_TO_MODEL_LIMIT:
            return tokens if max_model_len is None else min(tokens, max_model_len)
        if self.truncate is None or self.truncate < 1:
            return tokens
        return min(tokens, self.truncate)


class NotCountable(Exception):
    """The prompt cannot be counted with the tokenizer; the message says why."""


class _GenerationBlock(Extension):
    """transformers' ``{% generation %}…{% endgeneration %}``, which marks the assistant's text
    for training masks: rendered as its body."""

    tags: ClassVar[set[str]] = {"generation"}

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Macro) -> str:
        return str(caller())


def _raise_exception(message: str) -> NoReturn:
    raise TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # transformers' filter: Jinja's own escapes HTML characters, which would change the count.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(pattern: str) -> str:
    return datetime.now().strftime(pattern)


# The environment transformers renders chat templates in, with the same globals and filters.
_TEMPLATES = ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True,
    extensions=[_GenerationBlock, "jinja2.ext.loopcontrols"])
_TEMPLATES.filters["tojson"] = _tojson
_TEMPLATES.globals["raise_exception"] = _raise_exception
_TEMPLATES.globals["strftime_now"] = _strftime_now


class PromptTokenizer:
    """One version's tokenizer and chat template, counting as the backend does."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        """From the control plane's tokenizer document; ``ValueError`` when it makes none."""
        text = document.get("tokenizer_json")
        if not isinstance(text, str):
            raise ValueError("the document has no tokenizer_json text")
        try:
            self.tokenizer = Tokenizer.from_str(text)
        except Exception as exc:  # noqa: BLE001 - tokenizers raises plain Exception
            raise ValueError(f"tokenizer.json does not load: {exc}") from None
        special = document.get("special_tokens") or {}
        self.special_tokens = {name: token for name, token in special.items()
                               if isinstance(name, str) and isinstance(token, str)}
        self.template: Any = None
        self.template_problem = "the model has no chat template"
        template = document.get("chat_template")
        if isinstance(template, str) and template:
            try:
                self.template = _TEMPLATES.from_string(template)
            except TemplateError as exc:
                self.template_problem = f"its chat template does not compile: {exc}"

    def count(self, prompt: Prompt) -> int:
        """The prompt's tokens before truncation; ``NotCountable`` when the chat template cannot
        render it."""
        assert prompt.text is not None
        if not prompt.chat:
            return len(self.tokenizer.encode(prompt.text, add_special_tokens=True))
        return len(self.tokenizer.encode(self.render_chat(prompt.text), add_special_tokens=False))

    def render_chat(self, messages_json: str) -> str:
        """The prompt the backend makes of chat messages (``text_input``, JSON)."""
        if self.template is None:
            raise NotCountable(self.template_problem)
        try:
            # The backend's own reading of the messages, so both render the same ones.
            messages = [message.as_dict() for message in parse_messages(messages_json)]
        except InvalidRequest as exc:
            raise NotCountable(f"the backend refuses these messages: {exc.message}") from None
        try:
            return str(self.template.render(messages=messages, tools=None, documents=None,
                                            add_generation_prompt=True, **self.special_tokens))
        except TemplateError as exc:
            raise NotCountable(f"its chat template refused the messages: {exc}") from None


@dataclass
class _Failure:
    reason: str
    retry_at: float
    delay_s: float


class PromptTokens:
    """Counts prompts with each route's tokenizer, fetched once per (model, version)."""

    def __init__(self, base_url: str, token: str | None, fallbacks: Counter, *,
                 cache_size: int = 8, retry_min_s: float = RETRY_MIN_S,
                 retry_max_s: float = RETRY_MAX_S, fetch_wait_s: float = FETCH_WAIT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # A tokenizer.json is megabytes: reading it may take longer than a routing table.
        self._client = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers,
                                         timeout=httpx.Timeout(5.0, read=60.0))
        self._fallbacks = fallbacks
        self.cache_size = cache_size
        self.retry_min_s = retry_min_s
        self.retry_max_s = retry_max_s
        self.fetch_wait_s = fetch_wait_s
        self._clock = clock
        self._tokenizers: OrderedDict[tuple[str, int], PromptTokenizer] = OrderedDict()
        self._failures: OrderedDict[tuple[str, int], _Failure] = OrderedDict()
        self._fetches: dict[tuple[str, int], asyncio.Task[PromptTokenizer | None]] = {}
        # (version, reason) already logged: once each, not once per request.
        self._logged: OrderedDict[tuple[tuple[str, int], str], None] = OrderedDict()

    async def count(self, route: Route, prompt: Prompt) -> int | None:
        """The prompt's tokens as the backend will count them (after truncation), or None when
        the caller must reserve it by bytes."""
        if prompt.text is None:
            return None
        if route.version is None:
            self._fell_back((route.model, 0), NO_TOKENIZER,
                            "the routing table names no version for it")
            return None
        key = (route.model, route.version)
        tokenizer = await self._tokenizer_for(key)
        if tokenizer is None:
            return None
        try:
            if prompt.size > INLINE_BYTES:
                tokens = await asyncio.to_thread(tokenizer.count, prompt)
            else:
                tokens = tokenizer.count(prompt)
        except NotCountable as exc:
            self._fell_back(key, CHAT_TEMPLATE, str(exc))
            return None
        return prompt.kept(tokens, route.max_model_len)

    async def _tokenizer_for(self, key: tuple[str, int]) -> PromptTokenizer | None:
        tokenizer = self._tokenizers.get(key)
        if tokenizer is not None:
            self._tokenizers.move_to_end(key)
            return tokenizer
        failure = self._failures.get(key)
        if failure is not None and self._clock() < failure.retry_at:
            self._fallbacks.labels(failure.reason).inc()
            return None
        fetch = self._fetches.get(key)
        if fetch is None:
            # One fetch per version, whoever asks meanwhile waits on it.
            fetch = asyncio.create_task(self._fetch(key), name=f"tokenizer {key[0]}/{key[1]}")
            self._fetches[key] = fetch
        try:
            # Shielded: a request that stops waiting leaves the fetch to finish for the next.
            return await asyncio.wait_for(asyncio.shield(fetch), self.fetch_wait_s)
        except TimeoutError:
            self._fell_back(key, FETCHING, f"its tokenizer did not arrive within "
                                           f"{self.fetch_wait_s:g} s")
            return None

    async def _fetch(self, key: tuple[str, int]) -> PromptTokenizer | None:
        model, version = key
        try:
            try:
                response = await self._client.get(
                    f"/api/v1/models/{model}/versions/{version}/tokenizer")
            except httpx.HTTPError as exc:
                return self._failed(key, FETCH_FAILED, f"{type(exc).__name__}: {exc}")
            if response.status_code == 404:
                return self._failed(key, NO_TOKENIZER, _detail(response))
            if response.status_code != 200:
                return self._failed(key, FETCH_FAILED, f"the control plane answered "
                                    f"{response.status_code}: {_detail(response)}")
            try:
                # Parsing megabytes of JSON and building the tokenizer: off the event loop.
                tokenizer = await asyncio.to_thread(_build, response.content)
            except Exception as exc:  # noqa: BLE001 - no document may fail the requests waiting
                return self._failed(key, INVALID_TOKENIZER, f"{type(exc).__name__}: {exc}")
        finally:
            self._fetches.pop(key, None)
        if self._failures.pop(key, None) is not None:
            log.warning("prompt tokens of %s version %s: counted with its tokenizer again",
                        model, version)
        self._tokenizers[key] = tokenizer
        while len(self._tokenizers) > self.cache_size:
            self._tokenizers.popitem(last=False)
        return tokenizer

    def _failed(self, key: tuple[str, int], reason: str, detail: str) -> None:
        previous = self._failures.pop(key, None)
        delay = self.retry_min_s if previous is None else min(self.retry_max_s,
                                                             previous.delay_s * 2)
        self._failures[key] = _Failure(reason, self._clock() + delay, delay)
        while len(self._failures) > 4 * self.cache_size + 64:
            self._failures.popitem(last=False)
        self._fell_back(key, reason, f"{detail} (tried again in {delay:g} s)")

    def _fell_back(self, key: tuple[str, int], reason: str, detail: str) -> None:
        self._fallbacks.labels(reason).inc()
        if (key, reason) in self._logged:
            return
        self._logged[(key, reason)] = None
        while len(self._logged) > 1024:
            self._logged.popitem(last=False)
        log.warning("prompt tokens of %s version %s are reserved by their byte length, not "
                    "counted with the model's tokenizer (%s): %s", key[0], key[1], reason, detail)

    async def aclose(self) -> None:
        await self._client.aclose()


def _build(body: bytes) -> PromptTokenizer:
    try:
        document = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"the answer is not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise ValueError("the answer is not a JSON object")
    return PromptTokenizer(document)


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    return str(detail) if detail else response.text[:300]
