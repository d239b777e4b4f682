"""All of vLLM's sampling parameters against the real engine: each family does what vLLM says,
structured outputs hold, logprobs come in the stock backend's tensors and JSON shape."""

from __future__ import annotations

import json
import math
import queue
import re
from collections import Counter
from typing import Any

import jsonschema
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from transformers import AutoTokenizer

from control_plane.demo_model import MODEL_DIR
from tests.integration.support import MODEL, http_generate

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return AutoTokenizer.from_pretrained(MODEL_DIR)


def generate(server: Any, sampling: dict[str, Any], **inputs: Any) -> dict[str, Any]:
    """Non-streaming HTTP generate with ``sampling`` in the ``sampling_parameters`` input (how
    the stock backend's clients send structured outputs and lists)."""
    status, body = http_generate(server, {
        "text_input": inputs.pop("prompt", PROMPT), "sampling_parameters": json.dumps(sampling),
        "exclude_input_in_output": True, **inputs})
    assert status == 200, body
    return body


def refused(server: Any, sampling: dict[str, Any]) -> str:
    status, body = http_generate(server, {"text_input": PROMPT,
                                          "sampling_parameters": json.dumps(sampling)})
    assert status == 400, body
    return body["error"]


def grpc_responses(server: Any, sampling: dict[str, Any], stream: bool,
                   **flags: bool) -> list[Any]:
    """Every response of one request sent as the stock backend's gRPC clients do."""
    def tensor(name: str, value: Any, dtype: str) -> Any:
        t = grpcclient.InferInput(name, [1], dtype)
        t.set_data_from_numpy(np.array([value], dtype=np.object_ if dtype == "BYTES" else bool))
        return t

    inputs = [tensor("text_input", PROMPT.encode(), "BYTES"), tensor("stream", stream, "BOOL"),
              tensor("sampling_parameters", json.dumps(sampling).encode(), "BYTES"),
              tensor("exclude_input_in_output", True, "BOOL")]
    inputs += [tensor(name, value, "BOOL") for name, value in flags.items()]
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer(MODEL, inputs, enable_empty_final_response=True)
        responses = []
        while True:
            result, error = results.get(timeout=120)
            assert error is None, error
            if result.as_numpy("text_output") is not None:
                responses.append(result)
            if result.get_response().parameters["triton_final_response"].bool_param:
                return responses
    finally:
        client.stop_stream()
        client.close()


def texts(result: Any, name: str) -> list[str]:
    return [value.decode() for value in result.as_numpy(name).tolist()]


# -- sampling families ---------------------------------------------------------------------------


def test_allowed_token_ids_and_logit_bias_steer_every_token(served, tokenizer):
    token = tokenizer.encode(" blue")[0]
    allowed = generate(served, {"allowed_token_ids": [token], "max_tokens": 4, "ignore_eos": True,
                                "temperature": 1.0})
    assert allowed["text_output"] == " blue" * 4
    # As a string key, as JSON has them.
    biased = generate(served, {"logit_bias": {str(token): 100}, "max_tokens": 3,
                               "ignore_eos": True, "temperature": 0})
    assert biased["text_output"] == " blue" * 3


def test_bad_words_are_never_generated(served):
    plain = generate(served, {"temperature": 0, "max_tokens": 8})["text_output"]
    assert "Paris" in plain
    avoided = generate(served, {"temperature": 0, "max_tokens": 8, "bad_words": ["Paris"]})
    assert "Paris" not in avoided["text_output"] and avoided["text_output"].strip()


def test_penalties_seed_and_min_tokens_take_effect(served, tokenizer):
    repeat = {"temperature": 0, "max_tokens": 24, "ignore_eos": True}
    plain = generate(served, repeat, prompt="one one one one one one")["text_output"]
    penalised = generate(served, {**repeat, "repetition_penalty": 2.0, "frequency_penalty": 1.5},
                         prompt="one one one one one one")["text_output"]
    def most_repeated(text: str) -> int:
        return max(Counter(re.findall(r"\w+", text.lower())).values())

    # The penalties change the greedy answer and repeat no word more often. (How repetitive the
    # plain answer is depends on the CPU's arithmetic: some machines' greedy path loops on "one",
    # others wander off into prose whose most repeated word appears twice.)
    assert penalised != plain, plain
    assert most_repeated(plain) >= most_repeated(penalised), (plain, penalised)
    sampled = {"temperature": 1.0, "max_tokens": 12, "seed": "1234", "top_k": "40"}
    assert generate(served, sampled) == generate(served, sampled)
    long = generate(served, {"temperature": 0, "max_tokens": 30, "min_tokens": 20,
                             "stop_token_ids": [tokenizer.eos_token_id]},
                    return_num_output_tokens=True)
    assert long["num_output_tokens"] >= 20


def test_truncate_prompt_tokens_keeps_the_last_tokens(served):
    body = generate(served, {"truncate_prompt_tokens": 3, "max_tokens": 2},
                    prompt="word " * 500, return_num_input_tokens=True)
    assert body["num_input_tokens"] == 3


def test_lora_name_on_a_model_without_adapters_is_refused_by_name(served):
    assert "serves no LoRA adapters" in refused(served, {"lora_name": "sql"})


def test_vllm_refusals_name_the_field_and_the_model_keeps_serving(served):
    assert "max allowed: 20" in refused(served, {"logprobs": 50})
    assert "out-of-vocab" in refused(served, {"logit_bias": {"99999999": 1}})
    assert "allowed_token_ids" in refused(served, {"allowed_token_ids": [99999999]})
    assert "did you mean temperature" in refused(served, {"temprature": 0})
    assert generate(served, {"max_tokens": 2})["text_output"]


# -- structured outputs --------------------------------------------------------------------------

CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20},
                   "is_capital": {"type": "boolean"}},
    "required": ["city", "is_capital"], "additionalProperties": False,
}


@pytest.mark.parametrize("form", ["string", "object"])
def test_json_schema_output_parses_and_validates(served, form):
    spec = {"json": CITY_SCHEMA}
    # The stock backend's clients send the structured outputs as a JSON string.
    value = json.dumps(spec) if form == "string" else spec
    body = generate(served, {"structured_outputs": value, "max_tokens": 60, "temperature": 0},
                    prompt="Describe Paris as JSON:", return_finish_reason=True)
    assert body["finish_reason"] == "stop", body
    jsonschema.validate(json.loads(body["text_output"]), CITY_SCHEMA)


def test_regex_choice_and_grammar_hold(served):
    regex = generate(served, {"structured_outputs": {"regex": r"[0-9]{3}-[A-Z]{2}"},
                              "max_tokens": 20})["text_output"]
    assert re.fullmatch(r"[0-9]{3}-[A-Z]{2}", regex), regex
    choice = generate(served, {"guided_decoding": {"choice": ["yes", "no"]}, "max_tokens": 5},
                      prompt="Is Paris in France?")["text_output"]
    assert choice in ("yes", "no")
    grammar = 'root ::= "(" digit "+" digit ")"\ndigit ::= [0-9]'
    sum_text = generate(served, {"structured_outputs": {"grammar": grammar}, "max_tokens": 10})
    assert re.fullmatch(r"\([0-9]\+[0-9]\)", sum_text["text_output"]), sum_text


@pytest.mark.parametrize(("spec", "words"), [
    ({"regex": "a(("}, "unclosed group"),
    ({"json": {"type": "nonsense"}}, "Invalid type"),
    ({"grammar": "root ::= ("}, "grammar"),
])
def test_a_spec_that_does_not_compile_is_invalid_argument_and_the_engine_lives(served, spec, words):
    error = refused(served, {"structured_outputs": spec, "max_tokens": 4})
    assert "sampling_parameters.structured_outputs" in error and words in error, error
    assert generate(served, {"max_tokens": 2})["text_output"]


# -- logprobs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_logprobs_in_the_stock_shape_and_the_sampled_tokens_make_the_text(served, stream):
    responses = grpc_responses(served, {"temperature": 0, "max_tokens": 8, "ignore_eos": True,
                                        "logprobs": 2}, stream,
                               return_logprobs=True, return_cumulative_logprob=True)
    # A stream sends the tokens in chunks (as many as arrived since the last response).
    assert len(responses) >= 2 if stream else len(responses) == 1
    text, positions = "", []
    for response in responses:
        text += texts(response, "text_output")[0]
        positions += json.loads(texts(response, "logprobs")[0])
        cumulative = float(response.as_numpy("cumulative_logprob")[0])
    assert len(positions) == 8
    sampled = []
    for position in positions:
        # The sampled token and the two most likely (the same one under greedy decoding).
        assert 2 <= len(position) <= 3
        for entry in position.values():
            assert set(entry) == {"logprob", "rank", "decoded_token"}
        best = min(position.values(), key=lambda entry: entry["rank"])
        assert best["rank"] == 1
        sampled.append(best)
    assert "".join(entry["decoded_token"] for entry in sampled) == text
    assert cumulative == pytest.approx(sum(entry["logprob"] for entry in sampled), abs=1e-3)


def test_logprobs_not_asked_for_are_null_and_cumulative_still_comes(served):
    [response] = grpc_responses(served, {"max_tokens": 3, "temperature": 0}, False,
                                return_logprobs=True, return_cumulative_logprob=True)
    assert texts(response, "logprobs") == ["null"]
    cumulative = float(response.as_numpy("cumulative_logprob")[0])
    assert math.isfinite(cumulative) and cumulative <= 0
    [plain] = grpc_responses(served, {"max_tokens": 3}, False)
    assert plain.as_numpy("logprobs") is None and plain.as_numpy("cumulative_logprob") is None


def test_prompt_logprobs_come_with_the_first_response(served, tokenizer):
    responses = grpc_responses(served, {"max_tokens": 3, "prompt_logprobs": 1}, True)
    prompt = json.loads(texts(responses[0], "prompt_logprobs")[0])
    assert len(prompt) == len(tokenizer.encode(PROMPT))
    assert prompt[0] is None and all(len(position) >= 1 for position in prompt[1:])
    assert all(r.as_numpy("prompt_logprobs") is None for r in responses[1:])


def test_http_generate_carries_logprobs_as_json_text(served):
    body = generate(served, {"temperature": 0, "max_tokens": 4, "logprobs": 1},
                    return_logprobs=True)
    assert len(json.loads(body["logprobs"])) == 4
