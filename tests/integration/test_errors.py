"""Bad input gets INVALID_ARGUMENT naming the field, and the model keeps serving."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.support import MODEL, GrpcStream, http_generate, stock_inputs

GOOD = {"text_input": "Hello", "parameters": {"max_tokens": 3, "temperature": 0}}


@pytest.mark.parametrize(("body", "field"), [
    ({"text_input": "Hi", "parameters": {"max_tokens": -1}}, "sampling_parameters.max_tokens"),
    ({"text_input": "Hi", "parameters": {"temprature": 0.2}}, "sampling_parameters.temprature"),
    ({"text_input": "Hi", "parameters": {"top_k": "many"}}, "sampling_parameters.top_k"),
    ({"text_input": "Hi", "sampling_parameters": "{not json"}, "sampling_parameters"),
    ({"text_input": "Hi", "sampling_parameters": "[1, 2]"}, "sampling_parameters"),
    ({"text_input": "Hi", "parameters": {"max_tokens": 5000}}, "sampling_parameters.max_tokens"),
    ({"text_input": "word " * 2100, "parameters": {"max_tokens": 1}}, "text_input"),
    ({"text_input": "", "parameters": {"max_tokens": 1}}, "text_input"),
    ({"text_input": "Hi", "parameters": {"priority": 9}}, "priority"),
    ({"text_input": "Hi", "parameters": {"priority": 1.5}}, "priority"),
    ({"text_input": "Hi", "parameters": {"priority": "urgent"}}, "priority"),
])
def test_http_bad_input_is_refused_with_the_field_named(served, body, field):
    status, error = http_generate(served, body)
    assert status == 400, error
    assert error["error"].startswith(f"{field}:"), error
    status, ok = http_generate(served, GOOD)
    assert status == 200 and ok["text_output"], "the model keeps serving after a bad request"


def test_a_1_mb_prompt_is_refused_from_its_size_before_tokenizing(served):
    # No SmolLM2 token stands for more than 81 bytes (a newline and 80 spaces), so 1 MB is at
    # least 12,946 tokens: refused without the ~0.9 s of tokenizing it.
    prompt = "word " * 209_716
    status, error = http_generate(served, {"text_input": prompt, "parameters": {"max_tokens": 1}})
    assert status == 400, error
    assert error["error"] == (
        "text_input: prompt is 1048580 bytes, so at least 12946 tokens (no token of this model "
        "stands for more than 81 bytes); this model's limit (max_model_len) is 2048 tokens for "
        "prompt and output together; shorten the prompt, or split it across requests"
    )
    status, ok = http_generate(served, GOOD)
    assert status == 200 and ok["text_output"]


def test_grpc_stream_bad_sampling_parameters_get_an_error_naming_the_field(served):
    # A gRPC stream carries only the error message (ModelStreamInferResponse has no status code);
    # the same error is a 400 over HTTP, as the test above shows.
    stream = GrpcStream(served)
    try:
        stream.submit("Hi", {"max_tokens": "lots"})
        result = stream.wait(timeout=30)
        assert result.error is not None and "sampling_parameters.max_tokens" in result.error
        assert not result.texts
    finally:
        stream.close()
    status, ok = http_generate(served, GOOD)
    assert status == 200 and ok["text_output"]


def test_grpc_non_boolean_flag_is_refused(served):
    stream = GrpcStream(served)
    try:
        inputs = stock_inputs("Hi", {"max_tokens": 2}, returns=False)
        inputs[1] = grpcclient.InferInput("stream", [2], "BOOL")
        inputs[1].set_data_from_numpy(np.array([True, False]))
        stream.client.async_stream_infer(MODEL, inputs, enable_empty_final_response=True)
        stream.start_reader()
        result = stream.wait(timeout=30)
    finally:
        stream.close()
    assert result.error is not None and "stream" in result.error, result
