"""Judging gates: pure functions from what a version answered to a gate result. No I/O, so every
rule is tested without a model."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from control_plane.registry.gates import ComparisonGate, Expectation, SmokeGate


@dataclass(frozen=True)
class Observation:
    """One request's outcome, as measured by the client."""

    text: str
    finish_reason: str | None
    output_tokens: int
    ttft_ms: float | None
    latency_ms: float
    error: str | None = None

    @property
    def tokens_per_second(self) -> float:
        return self.output_tokens / (self.latency_ms / 1000) if self.latency_ms > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.text, "finish_reason": self.finish_reason,
                "output_tokens": self.output_tokens,
                "ttft_ms": None if self.ttft_ms is None else round(self.ttft_ms, 1),
                "latency_ms": round(self.latency_ms, 1), "error": self.error}


def smoke_failures(expect: Expectation, seen: Observation) -> list[str]:
    """Every way ``seen`` misses ``expect``; empty when it passes."""
    if seen.error is not None:
        return [f"the request failed: {seen.error}"]
    failures = []
    if expect.non_empty and not seen.text.strip():
        failures.append("the output is empty")
    failures += [f"the output does not contain {needle!r}" for needle in expect.contains
                 if needle not in seen.text]
    failures += [f"the output contains {needle!r}" for needle in expect.not_contains
                 if needle in seen.text]
    if expect.regex is not None and re.search(expect.regex, seen.text) is None:
        failures.append(f"the output does not match /{expect.regex}/")
    if expect.finish_reason is not None and seen.finish_reason != expect.finish_reason:
        failures.append(f"finish_reason is {seen.finish_reason!r}, expected "
                        f"{expect.finish_reason!r}")
    if expect.min_output_tokens is not None and seen.output_tokens < expect.min_output_tokens:
        failures.append(f"{seen.output_tokens} output tokens, fewer than "
                        f"{expect.min_output_tokens}")
    if expect.max_output_tokens is not None and seen.output_tokens > expect.max_output_tokens:
        failures.append(f"{seen.output_tokens} output tokens, more than "
                        f"{expect.max_output_tokens}")
    if expect.max_ttft_ms is not None and (seen.ttft_ms is None or
                                           seen.ttft_ms > expect.max_ttft_ms):
        failures.append(f"time to first token {_ms(seen.ttft_ms)}, more than "
                        f"{expect.max_ttft_ms:g} ms")
    if expect.max_latency_ms is not None and seen.latency_ms > expect.max_latency_ms:
        failures.append(f"total latency {_ms(seen.latency_ms)}, more than "
                        f"{expect.max_latency_ms:g} ms")
    return failures


def smoke_result(index: int, gate: SmokeGate, phase: str, node: str, seen: Observation
                 ) -> dict[str, Any]:
    failures = smoke_failures(gate.expect, seen)
    return {"gate": gate.name or f"smoke[{index}]", "kind": "smoke", "phase": phase,
            "passed": not failures, "prompt": gate.prompt,
            "expectation": gate.expect.model_dump(mode="json", exclude_defaults=True) or
            {"non_empty": True},
            "actual": {**seen.as_dict(), "node": node},
            "reason": "; ".join(failures) or None}


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile (p95 of 20 samples is the 19th smallest)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def comparison_result(gate: ComparisonGate, node: str, current: Sequence[Observation],
                      candidate: Sequence[Observation], current_version: int,
                      candidate_version: int, candidate_adapter: str | None = None
                      ) -> dict[str, Any]:
    """``current`` and ``candidate`` hold one observation per prompt and round, in the same
    order: prompt-major, so index ``i`` of both is the same prompt. With ``candidate_adapter``
    the candidate is the version through that LoRA adapter, and current the version without."""
    failures: list[str] = []
    errors = [o.error for o in (*current, *candidate) if o.error is not None]
    measured: dict[str, Any] = {"node": node, "current_version": current_version,
                                "candidate_version": candidate_version,
                                "samples": len(candidate)}
    current_label = f"version {current_version}"
    if candidate_adapter is not None:
        measured["candidate_adapter"] = candidate_adapter
        current_label += " without an adapter"
    if errors:
        failures.append(f"{len(errors)} request(s) failed, first: {errors[0]}")
    else:
        identical = sum(c.text == n.text for c, n in zip(current, candidate, strict=True))
        measured["identical_share"] = round(identical / len(candidate), 4)
        current_ttft = percentile([o.ttft_ms or 0.0 for o in current], 0.95)
        candidate_ttft = percentile([o.ttft_ms or 0.0 for o in candidate], 0.95)
        measured |= {"current_ttft_p95_ms": round(current_ttft, 1),
                     "candidate_ttft_p95_ms": round(candidate_ttft, 1)}
        measured["ttft_p95_ratio"] = round(candidate_ttft / current_ttft, 4) \
            if current_ttft > 0 else None
        current_rate = _rate(current)
        candidate_rate = _rate(candidate)
        measured |= {"current_tokens_per_second": round(current_rate, 2),
                     "candidate_tokens_per_second": round(candidate_rate, 2)}
        measured["tokens_per_second_ratio"] = round(candidate_rate / current_rate, 4) \
            if current_rate > 0 else None
        if gate.min_identical_share is not None and \
                measured["identical_share"] < gate.min_identical_share:
            failures.append(f"identical greedy outputs {measured['identical_share']:.0%} of "
                            f"prompts, below {gate.min_identical_share:.0%}")
        if gate.max_ttft_p95_ratio is not None and measured["ttft_p95_ratio"] is not None and \
                measured["ttft_p95_ratio"] > gate.max_ttft_p95_ratio:
            failures.append(f"TTFT p95 {candidate_ttft:.0f} ms vs {current_ttft:.0f} ms for "
                            f"{current_label}: ratio {measured['ttft_p95_ratio']:.2f} "
                            f"above {gate.max_ttft_p95_ratio:g}")
        if gate.min_tokens_per_second_ratio is not None and \
                measured["tokens_per_second_ratio"] is not None and \
                measured["tokens_per_second_ratio"] < gate.min_tokens_per_second_ratio:
            failures.append(f"{candidate_rate:.1f} tokens/s vs {current_rate:.1f} for "
                            f"{current_label}: ratio {measured['tokens_per_second_ratio']:.2f} "
                            f"below {gate.min_tokens_per_second_ratio:g}")
        different = [(c, n) for c, n in zip(current, candidate, strict=True) if c.text != n.text]
        if different:
            measured["first_difference"] = {"current": different[0][0].text,
                                            "candidate": different[0][1].text}
    return {"gate": "compare", "kind": "compare", "phase": "candidate", "passed": not failures,
            "prompt": gate.prompts[0] if len(gate.prompts) == 1 else None,
            "expectation": gate.model_dump(mode="json", exclude_none=True, exclude={"prompts"}) |
            {"prompts": len(gate.prompts)},
            "actual": measured, "reason": "; ".join(failures) or None}


def skipped_comparison(gate: ComparisonGate, why: str) -> dict[str, Any]:
    return {"gate": "compare", "kind": "compare", "phase": "candidate", "passed": None,
            "prompt": None, "expectation": gate.model_dump(mode="json", exclude_none=True,
                                                           exclude={"prompts"}),
            "actual": {}, "reason": why}


def _rate(observations: Sequence[Observation]) -> float:
    seconds = sum(o.latency_ms for o in observations) / 1000
    return sum(o.output_tokens for o in observations) / seconds if seconds > 0 else 0.0


def _ms(value: float | None) -> str:
    return "none (no token)" if value is None else f"{value:.0f} ms"
