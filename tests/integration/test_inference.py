"""Generation over HTTP and gRPC, with requests as a client of Triton's stock vLLM backend sends them."""

from __future__ import annotations

from transformers import AutoTokenizer

from control_plane.demo_model import MODEL_DIR
from tests.integration.support import GrpcStream, http_generate

PROMPT = "The capital of France is"


def test_http_generate_non_streaming_includes_prompt_like_the_stock_backend(served):
    status, body = http_generate(served, {
        "text_input": PROMPT, "parameters": {"stream": False, "temperature": 0, "max_tokens": 8},
    })
    assert status == 200, body
    assert body["text_output"].startswith(PROMPT)
    assert len(body["text_output"]) > len(PROMPT)
    assert "Paris" in body["text_output"]


def test_http_generate_stream_sends_chunks_and_ends_with_finish_reason(served):
    status, events = http_generate(served, {
        "text_input": PROMPT, "stream": True, "return_finish_reason": True,
        "parameters": {"temperature": 0, "max_tokens": 6},
    }, stream=True)
    assert status == 200
    assert len(events) >= 2, events
    assert "".join(e["text_output"] for e in events).strip()
    assert events[-1]["finish_reason"] == "length"
    assert all(e["finish_reason"] == "" for e in events[:-1])


def test_grpc_stream_with_stock_inputs_counts_tokens(served):
    stream = GrpcStream(served)
    try:
        stream.submit(PROMPT, {"temperature": 0, "max_tokens": 10})
        result = stream.wait(timeout=60)
    finally:
        stream.close()
    assert result.error is None, result.error
    assert result.final
    assert len(result.texts) >= 2, "a stream sends one response per token chunk"
    assert result.text.strip()
    assert result.finish_reasons[-1] == "length"
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    assert result.num_input_tokens == len(tokenizer(PROMPT)["input_ids"])
    assert result.num_output_tokens == 10


def test_grpc_non_streaming_request_gets_one_response(served):
    stream = GrpcStream(served)
    try:
        stream.submit(PROMPT, {"temperature": 0, "max_tokens": 5}, stream=False)
        result = stream.wait(timeout=60)
    finally:
        stream.close()
    assert result.error is None, result.error
    assert len(result.texts) == 1
    assert result.texts[0].startswith(PROMPT), "non-streaming output includes the prompt by default"
    assert result.num_output_tokens == 5


def test_n_greater_than_one_returns_each_sequence(served):
    status, body = http_generate(served, {
        "text_input": PROMPT, "exclude_input_in_output": True,
        "parameters": {"n": 2, "temperature": 1.0, "seed": 7, "max_tokens": 4},
    })
    assert status == 200, body
    assert isinstance(body["text_output"], list) and len(body["text_output"]) == 2
