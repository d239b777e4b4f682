"""Admission: does a prompt, with the output it asks for, fit the model's context?"""

from __future__ import annotations

from dataclasses import dataclass

from llm_backend.errors import InvalidRequest


@dataclass(frozen=True)
class Admission:
    """Checks made before a request reaches the engine, so it fails fast with a named field."""

    max_model_len: int

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
