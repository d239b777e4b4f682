"""Reading the backend's token counts out of responses, and taking out the ones only the gateway
asked for: KServe HTTP JSON, SSE events split across chunks anywhere, gRPC raw and typed tensors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from gateway.token_counts import (
    SseReader,
    TokenTally,
    ask_counts,
    ask_counts_grpc,
    read_grpc,
    read_json,
)


def test_ask_counts_sets_both_flags_and_says_which_the_client_did_not_want() -> None:
    document = {"text_input": "x", "return_num_input_tokens": True}
    assert ask_counts(document) == {"num_output_tokens"}
    assert document["return_num_input_tokens"] is True
    assert document["return_num_output_tokens"] is True
    assert ask_counts({"return_num_output_tokens": False}) == {"num_input_tokens",
                                                              "num_output_tokens"}


def test_a_json_response_is_counted_and_stripped() -> None:
    tally = TokenTally()
    body = json.dumps({"text_output": "hi", "num_input_tokens": [7],
                       "num_output_tokens": [3]}).encode()
    stripped = json.loads(read_json(body, tally, frozenset({"num_output_tokens"})))
    assert stripped == {"text_output": "hi", "num_input_tokens": [7]}
    assert (tally.prompt, tally.output) == (7, 3)
    assert read_json(b"not json", tally, frozenset({"x"})) == b"not json"


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_sse_events_split_anywhere_are_counted_once_and_passed_on_whole(size: int) -> None:
    events = [{"text_output": t, "num_input_tokens": 5, "num_output_tokens": 1}
              for t in ("a", "b", "c")]
    stream = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    tally = TokenTally()
    reader = SseReader(tally, frozenset({"num_input_tokens", "num_output_tokens"}))
    out = b"".join(reader.feed(stream[i:i + size]) for i in range(0, len(stream), size))
    out += reader.rest()
    assert (tally.prompt, tally.output) == (5, 3)
    sent = [json.loads(chunk[len(b"data: "):]) for chunk in out.split(b"\n\n") if chunk]
    assert sent == [{"text_output": t} for t in ("a", "b", "c")]


def _request(raw: bool, flag: bool | None) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    if raw:
        request.raw_input_contents.append(b"\x02\x00\x00\x00hi")
    else:
        request.inputs[0].contents.bytes_contents.append(b"hi")
    if flag is not None:
        tensor = request.inputs.add(name="return_num_output_tokens", datatype="BOOL", shape=[1])
        if raw:
            request.raw_input_contents.append(b"\x01" if flag else b"\x00")
        else:
            tensor.contents.bool_contents.append(flag)
    return request


@pytest.mark.parametrize("raw", [True, False])
@pytest.mark.parametrize("flag", [None, False, True])
def test_grpc_requests_ask_for_both_counts_in_their_own_content_kind(raw: bool,
                                                                     flag: bool | None) -> None:
    request = _request(raw, flag)
    added = ask_counts_grpc(request)
    assert added == ({"num_input_tokens"} if flag else {"num_input_tokens", "num_output_tokens"})
    names = [t.name for t in request.inputs]
    assert set(names) == {"text_input", "return_num_input_tokens", "return_num_output_tokens"}
    for name in ("return_num_input_tokens", "return_num_output_tokens"):
        index = names.index(name)
        if raw:
            assert len(request.raw_input_contents) == len(names)
            assert request.raw_input_contents[index] == b"\x01"
        else:
            assert list(request.inputs[index].contents.bool_contents) == [True]


def test_grpc_responses_are_counted_and_the_gateways_outputs_taken_out() -> None:
    response = pb.ModelInferResponse(model_name="m")
    for name, value in (("text_output", None), ("num_input_tokens", 9),
                        ("num_output_tokens", 2)):
        response.outputs.add(name=name, datatype="BYTES" if value is None else "UINT32",
                             shape=[1])
        response.raw_output_contents.append(
            b"\x02\x00\x00\x00ok" if value is None else np.array([value], np.uint32).tobytes())
    tally = TokenTally()
    read_grpc(response, tally, frozenset({"num_output_tokens"}))
    assert (tally.prompt, tally.output) == (9, 2)
    assert [t.name for t in response.outputs] == ["text_output", "num_input_tokens"]
    assert len(response.raw_output_contents) == 2
    assert response.raw_output_contents[1] == np.array([9], np.uint32).tobytes()
