"""Unit tests for llm_backend.sampling: client sampling parameters -> vLLM SamplingParams.

The accepted keys are vLLM's own SamplingParams fields; values may arrive as strings."""

from __future__ import annotations

import pytest
from vllm import SamplingParams
from vllm.sampling_params import (
    RepetitionDetectionParams,
    RequestOutputKind,
    StructuredOutputsParams,
)

from llm_backend.errors import InvalidRequest
from llm_backend.sampling import (
    ACCEPTED_KEYS,
    OWNED_FIELDS,
    SAMPLING_FIELDS,
    build_sampling_params,
    describe_type,
    parse_json_object,
    parse_sampling,
)

# key, value sent by the client, attribute value expected on SamplingParams
VALID = [
    ("n", 2, 2),
    ("n", "3", 3),
    ("max_tokens", 16, 16),
    ("max_tokens", "16", 16),
    ("max_tokens", " 32 ", 32),
    ("max_tokens", 8.0, 8),
    ("max_tokens", "16.0", 16),
    ("max_tokens", None, None),
    ("min_tokens", 2, 2),
    ("min_tokens", "2", 2),
    ("top_k", 5, 5),
    ("top_k", "0", 0),
    ("top_k", -1, -1),  # "disabled", accepted as sent
    ("seed", 42, 42),
    ("seed", "7", 7),
    ("seed", None, None),
    ("temperature", 0, 0.0),
    ("temperature", 0.7, 0.7),
    ("temperature", "0.5", 0.5),
    ("temperature", 1, 1.0),
    ("top_p", 0.9, 0.9),
    ("top_p", "0.5", 0.5),
    ("top_p", 1, 1.0),
    ("min_p", 0.1, 0.1),
    ("min_p", "0.05", 0.05),
    ("presence_penalty", 0.5, 0.5),
    ("presence_penalty", "-1.5", -1.5),
    ("frequency_penalty", 1, 1.0),
    ("frequency_penalty", "0.25", 0.25),
    ("repetition_penalty", 1.2, 1.2),
    ("repetition_penalty", "1.1", 1.1),
    ("ignore_eos", True, True),
    ("ignore_eos", "true", True),
    ("ignore_eos", "FALSE", False),
    ("ignore_eos", " True ", True),
    ("ignore_eos", 1, True),
    ("skip_special_tokens", False, False),
    ("skip_special_tokens", "false", False),
    ("spaces_between_special_tokens", False, False),
    ("spaces_between_special_tokens", "true", True),
    ("include_stop_str_in_output", True, True),
    ("include_stop_str_in_output", "false", False),
    ("stop", "END", ["END"]),
    ("stop", ["a", "b"], ["a", "b"]),
    ("stop", [], []),
    ("stop", None, []),
    ("stop_token_ids", [1, 2, 3], [1, 2, 3]),
    ("stop_token_ids", [], []),
    ("stop_token_ids", None, []),
    ("stop_token_ids", [1, "2"], [1, 2]),
    ("watermarking", False, False),
    ("logprobs", 3, 3),
    ("logprobs", "0", 0),
    ("prompt_logprobs", 1, 1),
    ("prompt_logprob_start", 2, 2),
    ("logprob_token_ids", [5, 6], [5, 6]),
    ("stream_interval", "2", 2),
    ("logit_bias", {"12": "1.5", "7": -2}, {12: 1.5, 7: -2.0}),
    ("allowed_token_ids", [1, 2], [1, 2]),
    ("bad_words", ["foo"], ["foo"]),
    ("skip_reading_prefix_cache", True, True),
    ("thinking_token_budget", 10, 10),
    ("structured_outputs", {"regex": "[ab]+"}, StructuredOutputsParams(regex="[ab]+")),
    ("repetition_detection", {"max_pattern_size": 4, "min_count": 3},
     RepetitionDetectionParams(max_pattern_size=4, min_count=3)),
]
# Keys with no value to compare on SamplingParams (an array, checked on its own below).
NOT_COMPARED = {"prompt_logprob_token_ids"}


def test_accepted_keys_are_vllms_fields_less_those_the_backend_owns():
    fields = {name for name in SamplingParams.__struct_fields__ if not name.startswith("_")}
    assert set(SAMPLING_FIELDS) == fields - OWNED_FIELDS
    assert {"logprobs", "structured_outputs", "logit_bias", "bad_words"} <= set(SAMPLING_FIELDS)
    assert {"lora_name", "truncate_prompt_tokens", "guided_decoding"} <= ACCEPTED_KEYS


def test_valid_table_covers_every_accepted_key():
    assert {key for key, _, _ in VALID} | NOT_COMPARED == set(SAMPLING_FIELDS)


@pytest.mark.parametrize(("key", "value", "expected"), VALID)
def test_accepted_keys_and_coercion(key, value, expected):
    params = build_sampling_params({key: value}, streaming=False)
    assert isinstance(params, SamplingParams)
    actual = getattr(params, key)
    if isinstance(expected, float):
        assert actual == pytest.approx(expected)
        assert isinstance(actual, float)
    else:
        assert actual == expected
    if isinstance(expected, bool):
        assert isinstance(actual, bool)
    elif isinstance(expected, int):
        assert type(actual) is int


def test_several_keys_together():
    params = build_sampling_params(
        {"temperature": "0.3", "max_tokens": "4", "top_p": 0.5, "stop": ["\n"], "seed": 1},
        streaming=True,
    )
    assert params.temperature == pytest.approx(0.3)
    assert params.max_tokens == 4
    assert params.top_p == 0.5
    assert params.stop == ["\n"]
    assert params.seed == 1


def test_empty_mapping_gives_vllm_defaults():
    params = build_sampling_params({}, streaming=False)
    assert params.n == 1
    assert params.max_tokens == 16
    assert params.temperature == 1.0


@pytest.mark.parametrize(
    ("streaming", "kind"),
    [(True, RequestOutputKind.DELTA), (False, RequestOutputKind.FINAL_ONLY)],
)
def test_output_kind_follows_streaming(streaming, kind):
    assert build_sampling_params({}, streaming=streaming).output_kind == kind
    assert build_sampling_params({"max_tokens": 3}, streaming=streaming).output_kind == kind


@pytest.mark.parametrize("key", sorted(OWNED_FIELDS))
def test_fields_the_backend_owns_are_refused_as_such(key):
    with pytest.raises(InvalidRequest) as info:
        build_sampling_params({key: 1}, streaming=False)
    assert info.value.field == f"sampling_parameters.{key}"
    assert "decided by the backend" in info.value.message


@pytest.mark.parametrize("key", ["logits_processors", "_eos_token_id", "guided_json"])
def test_internal_and_unknown_fields_are_refused(key):
    with pytest.raises(InvalidRequest) as info:
        build_sampling_params({key: 1}, streaming=False)
    assert info.value.field == f"sampling_parameters.{key}"
    assert "unknown sampling parameter" in info.value.message


def test_prompt_logprob_token_ids_become_an_array():
    params = build_sampling_params({"prompt_logprob_token_ids": [[1, 2], [3, -1]]},
                                   streaming=False)
    assert params.prompt_logprob_token_ids.tolist() == [[1, 2], [3, -1]]


# -- structured outputs, the backend's own keys ---------------------------------------------------


@pytest.mark.parametrize("key", ["structured_outputs", "guided_decoding"])
@pytest.mark.parametrize("value", ['{"json": {"type": "object"}}', {"json": {"type": "object"}}])
def test_structured_outputs_as_a_json_string_or_an_object(key, value):
    params = build_sampling_params({key: value}, streaming=False)
    assert params.structured_outputs == StructuredOutputsParams(json={"type": "object"})


@pytest.mark.parametrize(("value", "field", "words"), [
    ({"regex": "a", "choice": ["x"]}, "sampling_parameters.structured_outputs",
     "only use one kind"),
    ({}, "sampling_parameters.structured_outputs", "must use one kind"),
    ({"jsn": {}}, "sampling_parameters.structured_outputs.jsn", "unknown structured-output field"),
    ("{not json", "sampling_parameters.structured_outputs", "is not valid JSON"),
    ([1], "sampling_parameters.structured_outputs", "must be a JSON object"),
    ({"choice": "yes"}, "sampling_parameters.structured_outputs", "Expected `array"),
])
def test_bad_structured_outputs_name_the_field(value, field, words):
    with pytest.raises(InvalidRequest) as info:
        build_sampling_params({"structured_outputs": value}, streaming=False)
    assert info.value.field == field
    assert words in info.value.message


def test_structured_outputs_and_guided_decoding_together_are_refused():
    with pytest.raises(InvalidRequest) as info:
        build_sampling_params({"structured_outputs": {"regex": "a"},
                               "guided_decoding": {"regex": "b"}}, streaming=False)
    assert "send one" in info.value.message


def test_lora_name_and_truncation_are_the_backends():
    sampling = parse_sampling({"lora_name": "sql", "truncate_prompt_tokens": "8",
                               "temperature": 0}, streaming=False)
    assert (sampling.lora_name, sampling.truncate_prompt_tokens) == ("sql", 8)
    assert sampling.params.temperature == 0
    assert parse_sampling({"truncate_prompt_tokens": -1}, streaming=False) \
        .truncate_prompt_tokens == -1


@pytest.mark.parametrize("value", [0, -2, "x", 1.5])
def test_bad_truncation_is_refused(value):
    with pytest.raises(InvalidRequest) as info:
        parse_sampling({"truncate_prompt_tokens": value}, streaming=False)
    assert info.value.field == "sampling_parameters.truncate_prompt_tokens"


@pytest.mark.parametrize(("kind", "words"), [
    (int, "an integer"), (int | None, "an integer or null"),
    (list[str] | None, "a list of strings or null"),
    (dict[int, float], "an object of integer to number"),
])
def test_types_described_in_words(kind, words):
    assert describe_type(kind) == words


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [
        ("temprature", "temperature"),
        ("max_token", "max_tokens"),
        ("topp", "top_p"),
        ("stop_tokens_ids", "stop_token_ids"),
    ],
)
def test_unknown_key_names_key_and_suggests(typo, suggestion):
    with pytest.raises(InvalidRequest) as info:
        build_sampling_params({typo: 1}, streaming=False)
    err = info.value
    assert err.field == f"sampling_parameters.{typo}"
    assert typo in str(err)
    assert "did you mean" in err.message
    hint = err.message.split("did you mean", 1)[1].split("?", 1)[0]
    assert suggestion in hint
    # and the full list of accepted keys follows
    for known in ACCEPTED_KEYS:
        assert known in err.message


def test_unknown_key_without_close_match_has_no_hint():
    with pytest.raises(InvalidRequest) as info:
        build_sampling_params({"zzzzqqqq": 1}, streaming=False)
    assert info.value.field == "sampling_parameters.zzzzqqqq"
    assert "did you mean" not in info.value.message
    assert "accepted:" in info.value.message


def test_unknown_key_refused_even_next_to_valid_ones():
    with pytest.raises(InvalidRequest) as info:
        build_sampling_params({"temperature": 0.1, "temprature": 0.2}, streaming=False)
    assert info.value.field == "sampling_parameters.temprature"


WRONG_TYPES = [
    ("max_tokens", True),
    ("max_tokens", False),
    ("n", True),
    ("top_k", [1]),
    ("seed", "abc"),
    ("max_tokens", "abc"),
    ("max_tokens", 1.5),
    ("max_tokens", {"a": 1}),
    ("n", None),
    ("temperature", [0.5]),
    ("temperature", True),
    ("temperature", "hot"),
    ("temperature", None),
    ("top_p", {"x": 1}),
    ("repetition_penalty", False),
    ("ignore_eos", "yes"),
    ("include_stop_str_in_output", None),
    ("stop", 5),
    ("stop", ["a", 1]),
    ("stop", [["a"]]),
    ("stop_token_ids", [1, True]),
    ("stop_token_ids", "1,2"),
]


@pytest.mark.parametrize(("key", "value"), WRONG_TYPES)
def test_wrong_types_raise_invalid_request_naming_field(key, value):
    with pytest.raises(InvalidRequest) as info:
        build_sampling_params({key: value}, streaming=False)
    err = info.value
    assert err.field == f"sampling_parameters.{key}"
    assert err.message.startswith(f"sampling_parameters.{key}: must be ")
    assert describe_type(SAMPLING_FIELDS[key]) in err.message


def test_wrong_type_message_shows_value_as_json():
    with pytest.raises(InvalidRequest) as info:
        build_sampling_params({"max_tokens": True}, streaming=False)
    assert info.value.message == ("sampling_parameters.max_tokens: must be an integer or null, "
                                  "got true (Expected `int | null`, got `bool`)")


@pytest.mark.parametrize("value", [-1, "-1", 0])
def test_negative_or_zero_max_tokens_is_vllms_range_error(value):
    with pytest.raises(InvalidRequest) as info:
        build_sampling_params({"max_tokens": value}, streaming=False)
    assert info.value.field == "sampling_parameters.max_tokens"
    assert "max_tokens" in info.value.message
    assert "at least 1" in info.value.message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("temperature", -1),
        ("temperature", "nan"),
        ("temperature", "inf"),
        ("top_p", 2),
        ("top_p", 0),
        ("min_p", 1.5),
        ("top_k", -5),
        ("n", 0),
        ("repetition_penalty", 0),
        ("presence_penalty", 3),
    ],
)
def test_vllm_range_errors_name_the_field(key, value):
    with pytest.raises(InvalidRequest) as info:
        build_sampling_params({key: value}, streaming=False)
    assert info.value.field == f"sampling_parameters.{key}"
    assert key in info.value.message
    assert "\n" not in info.value.message


def test_vllm_cross_field_error_is_invalid_request():
    with pytest.raises(InvalidRequest) as info:
        build_sampling_params({"min_tokens": 5, "max_tokens": 2}, streaming=False)
    assert info.value.field in (
        "sampling_parameters.min_tokens",
        "sampling_parameters.max_tokens",
    )


def test_range_error_field_not_misattributed_to_n():
    with pytest.raises(InvalidRequest) as info:
        build_sampling_params({"n": 1, "max_tokens": -1}, streaming=False)
    assert info.value.field == "sampling_parameters.max_tokens"


# -- parse_json_object ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ['{"a": 1', "{'a': 1}", "", "not json", '{"a": 1,}', "{} {}"],
)
def test_parse_json_object_malformed(text):
    with pytest.raises(InvalidRequest) as info:
        parse_json_object(text, "sampling_parameters")
    assert info.value.field == "sampling_parameters"
    assert "is not valid JSON" in info.value.message
    assert "at position" in info.value.message


@pytest.mark.parametrize(
    ("text", "type_name"),
    [("[1, 2]", "list"), ("1", "int"), ('"x"', "str"), ("null", "NoneType"), ("true", "bool"),
     ("1.5", "float")],
)
def test_parse_json_object_non_object(text, type_name):
    with pytest.raises(InvalidRequest) as info:
        parse_json_object(text, "parameters")
    assert info.value.field == "parameters"
    assert info.value.message == f"parameters: must be a JSON object, got {type_name}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("{}", {}), ('{"temperature": 0, "stop": ["x"]}', {"temperature": 0, "stop": ["x"]}),
     ('  {"a": {"b": null}}  ', {"a": {"b": None}})],
)
def test_parse_json_object_ok(text, expected):
    assert parse_json_object(text, "f") == expected
