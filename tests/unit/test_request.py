"""Unit tests for llm_backend.request: raw client inputs -> GenerationRequest."""

from __future__ import annotations

import pytest
from vllm.sampling_params import RequestOutputKind

from llm_backend.chat import ChatMessage
from llm_backend.errors import InvalidRequest
from llm_backend.gateway_trust import GatewayTrust
from llm_backend.priority import PriorityLevels
from llm_backend.request import (
    NON_SAMPLING_PARAMETERS,
    PRIORITY_PARAMETERS,
    TIMEOUT_PARAMETER,
    GenerationRequest,
    RawRequest,
    parse_parameters_json,
    parse_request,
)

LEVELS = PriorityLevels(count=3, default=3)


def parse(**kwargs) -> GenerationRequest:
    kwargs.setdefault("text_input", "Hello")
    return parse_request(RawRequest(**kwargs), LEVELS)


def test_minimal_request_defaults():
    req = parse(text_input=b"Hello world")
    assert req.prompt == "Hello world"
    assert req.streaming is False
    assert req.include_prompt_in_output is True
    assert req.return_finish_reason is False
    assert req.return_num_input_tokens is False
    assert req.return_num_output_tokens is False
    assert req.priority == 3
    assert req.priority_from_client is False
    assert req.sampling.output_kind == RequestOutputKind.FINAL_ONLY
    assert req.sampling.max_tokens == 16


@pytest.mark.parametrize(
    ("text_input", "prompt"),
    [(b"abc", "abc"), ("abc", "abc"), ("héllo ✓".encode(), "héllo ✓"), ("héllo ✓", "héllo ✓"),
     (b"", "")],
)
def test_text_input_bytes_and_str(text_input, prompt):
    assert parse(text_input=text_input).prompt == prompt


def test_missing_text_input():
    with pytest.raises(InvalidRequest) as info:
        parse(text_input=None)
    assert info.value.field == "text_input"
    assert "is required" in info.value.message


@pytest.mark.parametrize("bad", [b"\xff\xfe", b"abc\x80", b"\xc3"])
def test_text_input_invalid_utf8(bad):
    with pytest.raises(InvalidRequest) as info:
        parse(text_input=bad)
    assert info.value.field == "text_input"
    assert "is not valid UTF-8" in info.value.message


def test_sampling_parameters_invalid_utf8():
    with pytest.raises(InvalidRequest) as info:
        parse(sampling_parameters=b'{"temperature": "\xff"}')
    assert info.value.field == "sampling_parameters"
    assert "is not valid UTF-8" in info.value.message


@pytest.mark.parametrize("tensor", [b'{"temperature": 0.5, "max_tokens": "5"}',
                                    '{"temperature": 0.5, "max_tokens": "5"}'])
def test_sampling_parameters_tensor(tensor):
    req = parse(sampling_parameters=tensor)
    assert req.sampling.temperature == 0.5
    assert req.sampling.max_tokens == 5


def test_sampling_tensor_wins_over_request_parameters():
    req = parse(
        sampling_parameters=b'{"max_tokens": 5}',
        parameters={"max_tokens": 9, "temperature": 0.1, "bogus": 1, "priority": 2},
    )
    assert req.sampling.max_tokens == 5
    assert req.sampling.temperature == 1.0  # parameters ignored for sampling...
    assert req.priority == 2  # ...but priority still comes from them
    assert req.priority_from_client is True


@pytest.mark.parametrize("tensor", [b"", "", b"   ", "\n\t"])
def test_empty_sampling_tensor_means_defaults(tensor):
    req = parse(sampling_parameters=tensor, parameters={"max_tokens": 9})
    assert req.sampling.max_tokens == 16


@pytest.mark.parametrize(
    ("tensor", "fragment"),
    [(b'{"max_tokens": ', "is not valid JSON"), (b"[1]", "must be a JSON object, got list")],
)
def test_sampling_tensor_malformed(tensor, fragment):
    with pytest.raises(InvalidRequest) as info:
        parse(sampling_parameters=tensor)
    assert info.value.field == "sampling_parameters"
    assert fragment in info.value.message


def test_sampling_tensor_bad_value_names_key():
    with pytest.raises(InvalidRequest) as info:
        parse(sampling_parameters=b'{"temprature": 0}')
    assert info.value.field == "sampling_parameters.temprature"


def test_request_parameters_fallback_excludes_priority_and_id():
    req = parse(parameters={"temperature": "0.25", "max_tokens": 7, "priority": 1, "id": "req-9"})
    assert req.sampling.temperature == 0.25
    assert req.sampling.max_tokens == 7
    assert req.priority == 1
    assert req.priority_from_client is True


def test_non_sampling_parameters_set():
    assert PRIORITY_PARAMETERS == ("priority", "priority_level")
    assert TIMEOUT_PARAMETER == "timeout"
    assert NON_SAMPLING_PARAMETERS == frozenset({
        "priority", "priority_level", "timeout", "id", "input_format", "tenant", "gateway_secret",
        "tenant_weight",
    })
    # Every name the parser reads from the request parameters stays out of sampling.
    assert set(PRIORITY_PARAMETERS) | {TIMEOUT_PARAMETER} <= NON_SAMPLING_PARAMETERS


def test_request_parameters_fallback_excludes_priority_level_and_timeout():
    # Were they passed on as sampling parameters, vLLM would refuse them as unknown keys.
    req = parse(parameters={"max_tokens": 4, "priority_level": 2, "timeout": 250_000, "id": "r"})
    assert req.sampling.max_tokens == 4
    assert req.priority == 2
    assert req.priority_from_client is True
    assert req.queue_timeout_s == 0.25


def test_request_parameters_fallback_unknown_key():
    with pytest.raises(InvalidRequest) as info:
        parse(parameters={"max_tokenz": 3})
    assert info.value.field == "sampling_parameters.max_tokenz"
    assert "max_tokens" in info.value.message


@pytest.mark.parametrize(
    ("stream", "exclude", "streaming", "include", "kind"),
    [
        (None, None, False, True, RequestOutputKind.FINAL_ONLY),
        (False, None, False, True, RequestOutputKind.FINAL_ONLY),
        (True, None, True, False, RequestOutputKind.DELTA),
        (False, True, False, False, RequestOutputKind.FINAL_ONLY),
        (False, False, False, True, RequestOutputKind.FINAL_ONLY),
        (True, False, True, True, RequestOutputKind.DELTA),
        (True, True, True, False, RequestOutputKind.DELTA),
    ],
)
def test_stream_and_exclude_input(stream, exclude, streaming, include, kind):
    req = parse(stream=stream, exclude_input_in_output=exclude)
    assert req.streaming is streaming
    assert req.include_prompt_in_output is include
    assert req.sampling.output_kind == kind


@pytest.mark.parametrize("flag", [True, False, None])
def test_return_flags(flag):
    req = parse(
        return_finish_reason=flag, return_num_input_tokens=flag, return_num_output_tokens=flag
    )
    expected = bool(flag)
    assert req.return_finish_reason is expected
    assert req.return_num_input_tokens is expected
    assert req.return_num_output_tokens is expected


@pytest.mark.parametrize(
    ("sampling", "cumulative", "vllm_logprobs", "requested"),
    [
        ('{}', True, 0, False),  # the sampled token's logprob only, for vLLM to sum
        ('{}', False, None, False),
        ('{"logprobs": 3}', True, 3, True),
        ('{"logprobs": "2"}', False, 2, True),
        ('{"logprobs": null}', True, 0, False),
    ],
)
def test_cumulative_logprob_has_vllm_compute_logprobs_without_reporting_them(
        sampling, cumulative, vllm_logprobs, requested):
    req = parse(sampling_parameters=sampling, return_cumulative_logprob=cumulative)
    assert req.sampling.logprobs == vllm_logprobs
    assert req.logprobs_requested is requested
    assert req.return_cumulative_logprob is cumulative


@pytest.mark.parametrize(
    ("parameters", "priority", "from_client"),
    [
        ({}, 3, False),
        ({"priority": None}, 3, False),
        ({"priority": 1}, 1, True),
        ({"priority": "2"}, 2, True),
        ({"priority": 3}, 3, True),
    ],
)
def test_priority(parameters, priority, from_client):
    req = parse(parameters=parameters)
    assert req.priority == priority
    assert req.priority_from_client is from_client


@pytest.mark.parametrize("bad", [0, 4, "x", True, 1.5])
def test_priority_invalid(bad):
    with pytest.raises(InvalidRequest) as info:
        parse(parameters={"priority": bad})
    assert info.value.field == "priority"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, {}),
        ("", {}),
        ("{}", {}),
        ('{"priority": 1, "temperature": 0}', {"priority": 1, "temperature": 0}),
        ('{"llm_backend_wakeup": true}', {"llm_backend_wakeup": True}),
    ],
)
def test_parse_parameters_json(text, expected):
    assert parse_parameters_json(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("{", "is not valid JSON"), ("[]", "must be a JSON object, got list"),
     ("42", "must be a JSON object, got int")],
)
def test_parse_parameters_json_errors(text, fragment):
    with pytest.raises(InvalidRequest) as info:
        parse_parameters_json(text)
    assert info.value.field == "parameters"
    assert fragment in info.value.message


# -- priority_level alias ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parameters", "priority"),
    [
        ({"priority_level": 1}, 1),
        ({"priority_level": "2"}, 2),
        ({"priority_level": 3}, 3),
        ({"priority": 1, "priority_level": 1}, 1),
        ({"priority": 2, "priority_level": "2"}, 2),  # same value, different JSON types
        ({"priority": "1", "priority_level": 1}, 1),
    ],
)
def test_priority_level_alias(parameters, priority):
    req = parse(parameters=parameters)
    assert req.priority == priority
    assert req.priority_from_client is True


def test_priority_level_none_means_not_given():
    req = parse(parameters={"priority_level": None})
    assert req.priority == LEVELS.default
    assert req.priority_from_client is False


@pytest.mark.parametrize("bad", [0, 4, "x", True, 1.5])
def test_priority_level_invalid_is_reported_as_priority(bad):
    with pytest.raises(InvalidRequest) as info:
        parse(parameters={"priority_level": bad})
    assert info.value.field == "priority"


@pytest.mark.parametrize(
    ("priority", "priority_level"),
    [(1, 2), ("1", "3"), (3, 1)],
)
def test_priority_and_priority_level_disagree(priority, priority_level):
    with pytest.raises(InvalidRequest) as info:
        parse(parameters={"priority": priority, "priority_level": priority_level})
    assert info.value.field == "priority"
    assert "priority and priority_level disagree" in info.value.message
    # Both levels are shown, so the client sees what each name asked for.
    assert f"'priority': {int(priority)}" in info.value.message
    assert f"'priority_level': {int(priority_level)}" in info.value.message


def test_priority_disagreement_checked_even_with_sampling_tensor():
    with pytest.raises(InvalidRequest) as info:
        parse(sampling_parameters=b"{}", parameters={"priority": 1, "priority_level": 2})
    assert info.value.field == "priority"


def test_priority_none_does_not_conflict_with_priority_level():
    req = parse(parameters={"priority": None, "priority_level": 2})
    assert req.priority == 2


def test_priority_names_agree_when_they_resolve_to_the_same_level():
    req = parse(parameters={"priority": 2, "priority_level": 2.0})
    assert req.priority == 2 and req.priority_from_client


# -- queue timeout -------------------------------------------------------------------------------


def test_no_timeout_means_level_default():
    assert parse().queue_timeout_s is None
    assert parse(parameters={"timeout": None}).queue_timeout_s is None


@pytest.mark.parametrize(
    ("timeout", "seconds"),
    [(1, 1e-6), (1_000, 0.001), (250_000, 0.25), (1_500_000, 1.5), (30_000_000, 30.0),
     (0, None)],  # 0: not set (Triton's meaning), so the level's default applies
)
def test_timeout_parameter_microseconds(timeout, seconds):
    req = parse(parameters={"timeout": timeout})
    assert req.queue_timeout_s == seconds


@pytest.mark.parametrize("bad", [-1, -1_000_000, 1.5, 2.0, "5", "", True, False, [1], {"us": 1}])
def test_timeout_parameter_invalid(bad):
    with pytest.raises(InvalidRequest) as info:
        parse(parameters={"timeout": bad})
    assert info.value.field == "timeout"
    assert "non-negative integer number of microseconds" in info.value.message
    assert repr(bad) in info.value.message


def test_timeout_parameter_checked_even_with_sampling_tensor():
    with pytest.raises(InvalidRequest) as info:
        parse(sampling_parameters=b'{"max_tokens": 2}', parameters={"timeout": -5})
    assert info.value.field == "timeout"


@pytest.mark.parametrize("timeout_us", [None, 0])
def test_triton_timeout_unset_falls_back_to_parameter(timeout_us):
    req = parse(parameters={"timeout": 2_000_000}, timeout_us=timeout_us)
    assert req.queue_timeout_s == 2.0


@pytest.mark.parametrize("parameter", [None, 5_000_000, 0])
def test_triton_timeout_takes_precedence(parameter):
    parameters = {} if parameter is None else {"timeout": parameter}
    req = parse(parameters=parameters, timeout_us=750_000)
    assert req.queue_timeout_s == 0.75


def test_triton_timeout_microseconds_conversion():
    assert parse(timeout_us=1).queue_timeout_s == 1e-6
    assert parse(timeout_us=120_000_000).queue_timeout_s == 120.0


# -- input_format and the gateway's parameters ---------------------------------------------------

GATEWAY = GatewayTrust("s3cret")
CHAT = '[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]'


def test_gateway_parameters_and_input_format_stay_out_of_sampling():
    # Were they passed on as sampling parameters, they would be refused as unknown keys.
    req = parse_request(RawRequest(text_input=CHAT, parameters={
        "max_tokens": 3, "temperature": 0, "input_format": "chat", "tenant": "acme",
        "gateway_secret": "s3cret",
    }), LEVELS, GATEWAY)
    assert req.sampling.max_tokens == 3
    assert req.sampling.temperature == 0
    assert req.tenant == "acme"
    assert req.messages == (ChatMessage("system", "Be brief."), ChatMessage("user", "Hi"))


def test_text_input_format_is_the_default_and_keeps_the_prompt():
    for parameters in ({}, {"input_format": "text"}):
        req = parse(text_input=CHAT, parameters=parameters)
        assert req.prompt == CHAT
        assert req.messages is None
        assert req.include_prompt_in_output is True


def test_chat_prompt_waits_for_the_template_and_is_not_echoed_by_default():
    req = parse(text_input=CHAT, parameters={"input_format": "chat"})
    assert req.prompt == ""
    assert req.include_prompt_in_output is False


def test_chat_rendered_prompt_is_echoed_only_when_asked_for():
    req = parse(text_input=CHAT, parameters={"input_format": "chat"}, exclude_input_in_output=False)
    assert req.include_prompt_in_output is True


@pytest.mark.parametrize("value", ["Chat", "json", 1, True])
def test_unknown_input_format_is_refused(value):
    with pytest.raises(InvalidRequest) as info:
        parse(parameters={"input_format": value})
    assert info.value.field == "input_format"


def test_chat_text_input_must_be_messages():
    with pytest.raises(InvalidRequest) as info:
        parse(text_input="Hello", parameters={"input_format": "chat"})
    assert info.value.field == "text_input"
    assert "JSON array of messages" in info.value.message


def test_without_a_gateway_no_tenant_is_trusted():
    assert parse().tenant is None
    with pytest.raises(InvalidRequest) as info:
        parse(parameters={"tenant": "acme", "gateway_secret": "s3cret"})
    assert info.value.field == "tenant"
    assert "may only be set by the gateway" in info.value.message
    assert "s3cret" not in info.value.message


def test_gateway_claim_is_checked_even_with_a_sampling_tensor():
    with pytest.raises(InvalidRequest) as info:
        parse_request(RawRequest(text_input="Hi", sampling_parameters=b"{}",
                                 parameters={"tenant": "acme", "gateway_secret": "wrong"}),
                      LEVELS, GATEWAY)
    assert info.value.field == "tenant"
