"""What one response carries, built from vLLM's ``RequestOutput`` without any Triton types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from llm_backend.errors import BackendError


@dataclass
class OutputChunk:
    """Text and counts for one response; one entry per sequence when ``n > 1``."""

    texts: list[str]
    finish_reasons: list[str]
    num_output_tokens: list[int]
    num_input_tokens: int
    # Per sequence: the new tokens' logprobs as the stock JSON, and the running sum.
    logprobs: list[str] = field(default_factory=list)
    cumulative_logprobs: list[float] = field(default_factory=list)
    # The prompt's logprobs (JSON), in the first response of a request that asked for them.
    prompt_logprobs: str | None = None


@dataclass
class SequenceProgress:
    """Tokens generated so far per sequence, for token counts and latency metrics."""

    tokens: dict[int, int] = field(default_factory=dict)


class ResponseSink(Protocol):
    """Where a request's responses go (Triton's response sender in production)."""

    def send(self, chunk: OutputChunk | None, final: bool) -> None: ...

    def fail(self, error: BackendError) -> None: ...

    def is_cancelled(self) -> bool: ...


class BackendMetrics(Protocol):
    """The backend's custom metrics; ``triton_metrics.py`` publishes them on Triton's /metrics."""

    def observe_prompt_tokens(self, count: int) -> None: ...

    def observe_generated_tokens(self, count: int) -> None: ...

    def observe_time_to_first_token(self, seconds: float) -> None: ...

    def observe_inter_token_latency(self, seconds: float) -> None: ...

    def observe_tenant_request(self, tenant: str, generated_tokens: int) -> None:
        """One request of ``tenant`` ended, having generated ``generated_tokens``."""
        ...

    def set_requests(self, inflight: dict[int, int], waiting: dict[int, int]) -> None: ...

    def set_tenant_requests(self, tenants: dict[str, tuple[int, int, int]]) -> None:
        """Per tenant: (running, waiting, preempted so far)."""
        ...

    def set_engine_requests(self, running: int, waiting: int) -> None: ...
