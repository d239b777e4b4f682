"""Unit tests for llm_backend.admission.Admission."""

from __future__ import annotations

import pytest

from llm_backend.admission import Admission
from llm_backend.errors import InvalidRequest

ADMIT = Admission(max_model_len=100)


@pytest.mark.parametrize(
    ("prompt_tokens", "max_tokens"),
    [(1, None), (99, None), (1, 99), (50, 50), (90, 10), (10, 1), (99, 1), (1, 0)],
)
def test_fits(prompt_tokens, max_tokens):
    assert ADMIT.check(prompt_tokens, max_tokens) is None


@pytest.mark.parametrize("max_tokens", [None, 1, 1000])
def test_empty_prompt(max_tokens):
    with pytest.raises(InvalidRequest) as info:
        ADMIT.check(0, max_tokens)
    assert info.value.field == "text_input"
    assert "is empty" in info.value.message


@pytest.mark.parametrize("prompt_tokens", [100, 101, 5000])
@pytest.mark.parametrize("max_tokens", [None, 1])
def test_prompt_at_or_over_limit(prompt_tokens, max_tokens):
    with pytest.raises(InvalidRequest) as info:
        ADMIT.check(prompt_tokens, max_tokens)
    err = info.value
    assert err.field == "text_input"
    assert f"prompt is {prompt_tokens} tokens" in err.message
    assert "max_model_len" in err.message
    assert "100 tokens" in err.message


@pytest.mark.parametrize(
    ("prompt_tokens", "max_tokens", "suggested"),
    [(90, 11, 10), (1, 100, 99), (50, 51, 50), (99, 2, 1)],
)
def test_prompt_plus_output_over_limit(prompt_tokens, max_tokens, suggested):
    with pytest.raises(InvalidRequest) as info:
        ADMIT.check(prompt_tokens, max_tokens)
    err = info.value
    assert err.field == "sampling_parameters.max_tokens"
    assert f"{max_tokens} output tokens after a {prompt_tokens}-token prompt" in err.message
    assert "max_model_len 100" in err.message
    assert err.message.endswith(f"ask for at most {suggested}")
    # the suggestion really fits
    ADMIT.check(prompt_tokens, suggested)
