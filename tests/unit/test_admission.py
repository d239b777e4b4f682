"""Unit tests for llm_backend.admission.Admission."""

from __future__ import annotations

import pytest

from llm_backend.admission import Admission
from llm_backend.errors import InvalidRequest
from llm_backend.token_bytes import TokenBytes

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


# -- refusing from the prompt's byte length, before tokenizing ------------------------------------

BOUNDED = Admission(max_model_len=100, token_bytes=TokenBytes(8))


@pytest.mark.parametrize("prompt_bytes", [0, 1, 8, 99 * 8 - 1, 99 * 8])
def test_prompt_bytes_that_may_fit_pass(prompt_bytes):
    # 99 tokens of 8 bytes each would fit; the token count decides those.
    assert BOUNDED.check_prompt_bytes(b"x" * prompt_bytes) is None


@pytest.mark.parametrize(("prompt_bytes", "at_least"),
                         [(99 * 8 + 1, 100), (800, 100), (801, 101), (4 * 2**20, 524288)])
def test_prompt_bytes_that_cannot_fit_are_refused(prompt_bytes, at_least):
    with pytest.raises(InvalidRequest) as info:
        BOUNDED.check_prompt_bytes(b"x" * prompt_bytes)
    err = info.value
    assert err.field == "text_input"
    assert f"prompt is {prompt_bytes} bytes, so at least {at_least} tokens" in err.message
    assert "more than 8 bytes" in err.message
    assert "(max_model_len) is 100 tokens" in err.message
    assert "shorten the prompt" in err.message


def test_the_byte_refusal_agrees_with_the_token_refusal():
    # The smallest refused byte length, made of the longest tokens, is refused by count too.
    with pytest.raises(InvalidRequest):
        BOUNDED.check_prompt_bytes(b"x" * (99 * 8 + 1))
    with pytest.raises(InvalidRequest):
        BOUNDED.check(-(-(99 * 8 + 1) // 8), None)


def test_bytes_the_tokenizer_drops_are_not_counted():
    admission = Admission(max_model_len=100, token_bytes=TokenBytes(8, dropped=b"\x04"))
    assert admission.check_prompt_bytes(b"\x04" * 10_000 + b"Hello") is None
    with pytest.raises(InvalidRequest) as info:
        admission.check_prompt_bytes(b"\x04" * 10 + b"x" * 800)
    assert "prompt is 810 bytes (10 of them bytes the tokenizer drops), so at least 100 tokens" \
        in info.value.message


def test_without_a_byte_bound_only_tokens_decide():
    assert ADMIT.token_bytes is None
    assert ADMIT.check_prompt_bytes(b"x" * 10**7) is None
