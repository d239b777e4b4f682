"""The backend's own token counts, for settling a request against its tenant's token limits: the
gateway asks for the stock outputs ``num_input_tokens`` / ``num_output_tokens`` when the client
did not, reads them from every response (KServe HTTP's JSON and SSE events, gRPC's tensors), and
takes out of the client's responses the ones only the gateway asked for."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2 as pb

FLAGS = {"num_input_tokens": "return_num_input_tokens",
         "num_output_tokens": "return_num_output_tokens"}


@dataclass
class TokenTally:
    """What the backend counted for one request so far: the prompt once, the outputs summed
    (each response carries the tokens it adds; a non-streamed one, all of them)."""

    prompt: int | None = None
    output: int = 0

    def add(self, name: str, values: Iterable[int]) -> None:
        numbers = [int(v) for v in values]
        if name == "num_input_tokens" and numbers:
            self.prompt = max(numbers[0], self.prompt or 0)
        elif name == "num_output_tokens":
            self.output += sum(numbers)

    def add_document(self, document: dict[str, Any]) -> None:
        for name in FLAGS:
            value = document.get(name)
            if value is not None:
                self.add(name, value if isinstance(value, list) else [value])


# -- KServe HTTP (generate, generate_stream) ------------------------------------------------------

def ask_counts(document: dict[str, Any]) -> frozenset[str]:
    """Ask for both counts in a generate body; the outputs the client did not ask for."""
    added = set()
    for output, flag in FLAGS.items():
        if document.get(flag) is not True:
            document[flag] = True
            added.add(output)
    return frozenset(added)


def read_json(body: bytes, tally: TokenTally, strip: frozenset[str]) -> bytes:
    """One JSON response: counted, and returned without ``strip`` (unchanged when empty)."""
    try:
        document = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return body
    if not isinstance(document, dict):
        return body
    tally.add_document(document)
    if not strip or not strip & document.keys():
        return body
    return json.dumps({k: v for k, v in document.items() if k not in strip}).encode()


class SseReader:
    """Server-sent events as they arrive in chunks of any size: each whole event counted (and
    stripped), the bytes passed on at event boundaries."""

    def __init__(self, tally: TokenTally, strip: frozenset[str]) -> None:
        self.tally = tally
        self.strip = strip
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        self._pending += chunk
        *events, self._pending = self._pending.split(b"\n\n")
        return b"".join(self._event(event) + b"\n\n" for event in events)

    def rest(self) -> bytes:
        pending, self._pending = self._pending, b""
        return self._event(pending) if pending.strip() else pending

    def _event(self, event: bytes) -> bytes:
        lines = event.split(b"\n")
        for index, line in enumerate(lines):
            if line.startswith(b"data: "):
                lines[index] = b"data: " + read_json(line[len(b"data: "):], self.tally,
                                                     self.strip)
        return b"\n".join(lines)


# -- KServe gRPC (ModelStreamInfer) -------------------------------------------------------------

def ask_counts_grpc(request: pb.ModelInferRequest) -> frozenset[str]:
    """Set both ``return_num_*`` inputs true (raw or typed contents, as the request has them);
    the outputs the client did not ask for."""
    added = set()
    raw = bool(request.raw_input_contents)
    names = [tensor.name for tensor in request.inputs]
    for output, flag in FLAGS.items():
        if flag in names:
            index = names.index(flag)
            if raw:
                asked = request.raw_input_contents[index][:1] not in (b"", b"\x00")
                request.raw_input_contents[index] = b"\x01"
            else:
                contents = request.inputs[index].contents.bool_contents
                asked = bool(contents) and bool(contents[0])
                del contents[:]
                contents.append(True)
            if not asked:
                added.add(output)
            continue
        tensor = request.inputs.add(name=flag, datatype="BOOL", shape=[1])
        if raw:
            request.raw_input_contents.append(b"\x01")
        else:
            tensor.contents.bool_contents.append(True)
        added.add(output)
    return frozenset(added)


def read_grpc(response: pb.ModelInferResponse, tally: TokenTally, strip: frozenset[str]) -> None:
    """Count one response's token outputs, and take ``strip`` out of it (in place)."""
    raw = bool(response.raw_output_contents)
    for index in reversed(range(len(response.outputs))):
        tensor = response.outputs[index]
        if tensor.name not in FLAGS:
            continue
        if raw and index < len(response.raw_output_contents):
            values: Iterable[int] = np.frombuffer(response.raw_output_contents[index],
                                                  dtype=np.uint32).tolist()
        else:
            values = list(tensor.contents.uint_contents)
        tally.add(tensor.name, values)
        if tensor.name in strip:
            del response.outputs[index]
            if raw and index < len(response.raw_output_contents):
                del response.raw_output_contents[index]
