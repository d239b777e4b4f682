"""What a version's gates are, as a manifest writes them: smoke prompts with expectations, and
comparisons against the version being replaced. Pure data; ``gate_checks`` judges, and
``gate_runner`` measures through Triton."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

Prompt = Annotated[str, StringConstraints(min_length=1, max_length=8192)]
Needle = Annotated[str, StringConstraints(min_length=1, max_length=1024)]
Milliseconds = Annotated[float, Field(gt=0, le=3_600_000)]
TokenCount = Annotated[int, Field(ge=0, le=65_536)]


class _Spec(BaseModel):
    # A misspelt expectation must not silently pass every version.
    model_config = ConfigDict(extra="forbid")


class Expectation(_Spec):
    """What one smoke prompt's output must satisfy; every field left out is not checked."""

    non_empty: bool = Field(default=True, description="the output has at least one character")
    contains: list[Needle] = Field(default_factory=list, max_length=32,
                                   description="each must appear in the output (case-sensitive)")
    not_contains: list[Needle] = Field(default_factory=list, max_length=32,
                                       description="none may appear in the output")
    regex: Annotated[str, StringConstraints(min_length=1, max_length=1024)] | None = Field(
        default=None, description="Python regular expression searched for in the output")
    finish_reason: Literal["stop", "length"] | None = Field(
        default=None, description="how generation must end: 'stop' (end of sequence or a stop "
                                  "string) or 'length' (max_tokens reached)")
    min_output_tokens: TokenCount | None = None
    max_output_tokens: TokenCount | None = None
    max_ttft_ms: Milliseconds | None = Field(default=None,
                                             description="most time to the first token")
    max_latency_ms: Milliseconds | None = Field(default=None,
                                                description="most time to the last token")

    @model_validator(mode="after")
    def _bounds_in_order(self) -> Self:
        if self.min_output_tokens is not None and self.max_output_tokens is not None and \
                self.min_output_tokens > self.max_output_tokens:
            raise ValueError(f"min_output_tokens ({self.min_output_tokens}) is above "
                             f"max_output_tokens ({self.max_output_tokens})")
        if self.regex is not None:
            import re
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"regex {self.regex!r} does not compile: {exc}") from None
        return self


class SmokeGate(_Spec):
    """One prompt sent to the version; its output must meet ``expect``."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = Field(
        default=None, description="shown in results; defaults to smoke[<index>]")
    prompt: Prompt
    max_tokens: Annotated[int, Field(ge=1, le=4096)] = 16
    temperature: Annotated[float, Field(ge=0, le=2)] = 0.0
    expect: Expectation = Field(default_factory=Expectation)


class ComparisonGate(_Spec):
    """The same prompts, greedy, on the candidate and on the version it replaces: the candidate
    must agree often enough and be no slower than the given factors. Skipped when no version
    serves the alias yet."""

    prompts: list[Prompt] = Field(min_length=1, max_length=64)
    max_tokens: Annotated[int, Field(ge=1, le=4096)] = 16
    rounds: Annotated[int, Field(ge=1, le=20, description="each prompt is sent this many "
                                                            "times to each version")] = 1
    min_identical_share: Annotated[float, Field(ge=0, le=1)] | None = Field(
        default=None, description="share of prompts whose greedy output is identical, at least")
    max_ttft_p95_ratio: Annotated[float, Field(gt=0, le=1000)] | None = Field(
        default=None, description="candidate's TTFT p95 over the current version's, at most")
    min_tokens_per_second_ratio: Annotated[float, Field(gt=0, le=1000)] | None = Field(
        default=None, description="candidate's output tokens/s over the current version's, at "
                                  "least (0.8: at most 20% slower)")

    @model_validator(mode="after")
    def _checks_something(self) -> Self:
        if self.min_identical_share is None and self.max_ttft_p95_ratio is None and \
                self.min_tokens_per_second_ratio is None:
            raise ValueError("a comparison gate needs at least one of min_identical_share, "
                             "max_ttft_p95_ratio, min_tokens_per_second_ratio")
        return self


class Gates(_Spec):
    """A version's gates: run against the candidate before the swap and on the served name
    after it (comparisons run before the swap only: afterwards nothing else serves)."""

    smoke: list[SmokeGate] = Field(default_factory=list, max_length=64)
    compare: ComparisonGate | None = None
