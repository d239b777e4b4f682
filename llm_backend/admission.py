"""Admission: does a prompt, with the output it asks for, fit the model's context?"""

from __future__ import annotations

from dataclasses import dataclass

from llm_backend.errors import InvalidRequest
from llm_backend.token_bytes import TokenBytes


@dataclass(frozen=True)
class Admission:
    """Checks made before a request reaches the engine, so it fails fast with a named field."""

    max_model_len: int
    # How many prompt bytes one token can stand for (token_bytes.py); None: no bound holds for
    # this tokenizer, so only the token count decides.
    token_bytes: TokenBytes | None = None

    def check_prompt_bytes(self, prompt: bytes) -> None:
        """Refuse, before tokenizing, a prompt whose length alone proves it cannot fit."""
        if self.token_bytes is None:
            return
        # A quick pass (memchr speed) to leave out bytes the tokenizer may drop, before a count
        # that would be exact only for the model's longest tokens.
        counted = self.token_bytes.counted_bytes(prompt)
        at_least = -(-counted // self.token_bytes.max_bytes)
        if at_least >= self.max_model_len:
            ignored = len(prompt) - counted
            size = f"{len(prompt)} bytes" + (
                f" ({ignored} of them bytes the tokenizer drops)" if ignored else "")
            raise InvalidRequest(
                "text_input",
                f"prompt is {size}, so at least {at_least} tokens (no token of this model stands "
                f"for more than {self.token_bytes.max_bytes} bytes); this model's limit "
                f"(max_model_len) is {self.max_model_len} tokens for prompt and output together; "
                "shorten the prompt, or split it across requests",
            )

    def check(self, prompt_tokens: int, max_tokens: int | None) -> None:
        """Refuse a prompt that cannot fit, or that leaves no room for ``max_tokens``."""
        if prompt_tokens == 0:
            raise InvalidRequest("text_input", "is empty; send at least one token of prompt")
        if prompt_tokens >= self.max_model_len:
            raise InvalidRequest(
                "text_input",
                f"prompt is {prompt_tokens} tokens; this model's limit (max_model_len) is "
                f"{self.max_model_len} tokens for prompt and output together",
            )
        if max_tokens is not None and prompt_tokens + max_tokens > self.max_model_len:
            raise InvalidRequest(
                "sampling_parameters.max_tokens",
                f"{max_tokens} output tokens after a {prompt_tokens}-token prompt exceed "
                f"max_model_len {self.max_model_len}; ask for at most "
                f"{self.max_model_len - prompt_tokens}",
            )
