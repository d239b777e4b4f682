"""Judging gates: every expectation, and the comparison with the version being replaced."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from control_plane.promotions.gate_checks import (
    Observation,
    comparison_result,
    percentile,
    smoke_failures,
    smoke_result,
)
from control_plane.registry.gates import ComparisonGate, Expectation, Gates, SmokeGate

PARIS = Observation(" Paris. It is", "length", 4, ttft_ms=40.0, latency_ms=200.0)


def test_an_output_that_meets_every_expectation_passes() -> None:
    expect = Expectation(contains=["Paris"], not_contains=["London"], regex=r"^\s*P\w+",
                         finish_reason="length", min_output_tokens=1, max_output_tokens=8,
                         max_ttft_ms=100, max_latency_ms=1000)
    assert smoke_failures(expect, PARIS) == []


@pytest.mark.parametrize(("expect", "failure"), [
    ({"contains": ["Rome"]}, "the output does not contain 'Rome'"),
    ({"not_contains": ["Paris"]}, "the output contains 'Paris'"),
    ({"regex": r"^\d+$"}, r"the output does not match /^\d+$/"),
    ({"finish_reason": "stop"}, "finish_reason is 'length', expected 'stop'"),
    ({"min_output_tokens": 5}, "4 output tokens, fewer than 5"),
    ({"max_output_tokens": 3}, "4 output tokens, more than 3"),
    ({"max_ttft_ms": 10}, "time to first token 40 ms, more than 10 ms"),
    ({"max_latency_ms": 100}, "total latency 200 ms, more than 100 ms"),
])
def test_each_missed_expectation_is_named(expect: dict[str, object], failure: str) -> None:
    assert smoke_failures(Expectation.model_validate(expect), PARIS) == [failure]


def test_empty_and_failed_outputs_fail() -> None:
    empty = Observation("  ", "stop", 0, ttft_ms=None, latency_ms=5.0)
    assert smoke_failures(Expectation(), empty) == ["the output is empty"]
    refused = Observation("", None, 0, None, 1.0, error="model 'm' is not ready")
    assert smoke_failures(Expectation(), refused) == ["the request failed: model 'm' is not ready"]


def test_a_smoke_result_carries_prompt_expectation_and_output() -> None:
    gate = SmokeGate(prompt="The capital of France is", expect=Expectation(contains=["Rome"]))
    result = smoke_result(0, gate, "candidate", "node-a", PARIS)
    assert (result["gate"], result["passed"], result["prompt"]) == \
        ("smoke[0]", False, "The capital of France is")
    assert result["expectation"] == {"contains": ["Rome"]}
    assert result["actual"]["text"] == " Paris. It is" and result["actual"]["node"] == "node-a"


def _runs(texts: list[str], ttft_ms: float, latency_ms: float) -> list[Observation]:
    return [Observation(t, "length", 8, ttft_ms, latency_ms) for t in texts]


def test_comparison_measures_agreement_and_both_versions_speed() -> None:
    gate = ComparisonGate(prompts=["a", "b"], min_identical_share=0.5, max_ttft_p95_ratio=1.5,
                          min_tokens_per_second_ratio=0.8)
    current = _runs(["x", "y"], ttft_ms=50, latency_ms=400)
    same_speed = comparison_result(gate, "n", current, _runs(["x", "z"], 60, 400), 1, 2)
    assert same_speed["passed"] is True
    assert same_speed["actual"]["identical_share"] == 0.5
    assert same_speed["actual"]["first_difference"] == {"current": "y", "candidate": "z"}
    slow = comparison_result(gate, "n", current, _runs(["x", "y"], 100, 800), 1, 2)
    assert slow["passed"] is False
    assert (slow["actual"]["current_ttft_p95_ms"], slow["actual"]["candidate_ttft_p95_ms"]) == \
        (50.0, 100.0)
    assert (slow["actual"]["current_tokens_per_second"],
            slow["actual"]["candidate_tokens_per_second"]) == (20.0, 10.0)
    assert "ratio 2.00 above 1.5" in slow["reason"] and "ratio 0.50 below 0.8" in slow["reason"]
    different = comparison_result(gate, "n", current, _runs(["p", "q"], 50, 400), 1, 2)
    assert "identical greedy outputs 0% of prompts, below 50%" in different["reason"]


def test_percentile_is_nearest_rank() -> None:
    assert percentile(list(range(1, 21)), 0.95) == 19
    assert percentile([7.0], 0.95) == 7.0


def test_gate_specs_refuse_what_cannot_be_checked() -> None:
    with pytest.raises(ValidationError, match="at least one of"):
        ComparisonGate(prompts=["a"])
    with pytest.raises(ValidationError, match="above max_output_tokens"):
        Expectation(min_output_tokens=5, max_output_tokens=2)
    with pytest.raises(ValidationError, match="does not compile"):
        Expectation(regex="(")
    with pytest.raises(ValidationError, match="extra"):
        Gates.model_validate({"smoke": [], "canary": {}})
