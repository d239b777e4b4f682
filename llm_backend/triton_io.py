"""Translation between Triton's request/response objects and the backend's plain types.

Takes ``triton_python_backend_utils`` as an argument: only the stub has that module.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from llm_backend.errors import BackendError, InvalidRequest, Unavailable
from llm_backend.outputs import OutputChunk
from llm_backend.request import GenerationRequest, RawRequest

OPTIONAL_BOOL_INPUTS = (
    "stream",
    "exclude_input_in_output",
    "return_finish_reason",
    "return_num_input_tokens",
    "return_num_output_tokens",
    "return_logprobs",
    "return_cumulative_logprob",
)


def _first(pb_utils: Any, request: Any, name: str) -> Any:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    values = tensor.as_numpy().reshape(-1)
    if values.size != 1:
        raise InvalidRequest(name, f"must hold exactly one element, got {values.size}")
    value = values[0]
    return value.item() if isinstance(value, np.generic) else value


def read_raw_request(pb_utils: Any, request: Any, parameters: dict[str, Any]) -> RawRequest:
    """Unpack a Triton request's tensors; absent optional inputs become None."""
    flags = {name: _first(pb_utils, request, name) for name in OPTIONAL_BOOL_INPUTS}
    for name, value in flags.items():
        if value is not None and not isinstance(value, bool):
            raise InvalidRequest(name, f"must be a boolean, got {value!r}")
    return RawRequest(
        text_input=_first(pb_utils, request, "text_input"),
        sampling_parameters=_first(pb_utils, request, "sampling_parameters"),
        parameters=parameters,
        timeout_us=int(request.timeout()),
        **flags,
    )


def triton_error(pb_utils: Any, error: BackendError) -> Any:
    """The TritonError a client sees for one of our errors: one status code per cause."""
    if isinstance(error, InvalidRequest):
        code = pb_utils.TritonError.INVALID_ARG
    elif isinstance(error, Unavailable):
        code = pb_utils.TritonError.UNAVAILABLE
    else:
        code = pb_utils.TritonError.INTERNAL
    return pb_utils.TritonError(error.message, code)


class TritonResponseSink:
    """Sends a request's responses through its decoupled response sender.

    Sends after the final one are dropped, so an abort racing a normal finish cannot send two
    final flags (Triton would reject the second).
    """

    def __init__(self, pb_utils: Any, sender: Any) -> None:
        self._pb = pb_utils
        self._sender = sender
        self._lock = threading.Lock()
        self._closed = False
        self.generation: GenerationRequest | None = None

    def _emit(self, response: Any | None, final: bool) -> None:
        with self._lock:
            if self._closed:
                return
            flags = self._pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
            if response is None:
                self._sender.send(flags=flags)
            else:
                self._sender.send(response, flags=flags)
            if final:
                self._closed = True
                # Drop the sender now: one kept alive until interpreter exit crashes the stub.
                self._sender = None

    def send(self, chunk: OutputChunk | None, final: bool) -> None:
        if chunk is None:
            self._emit(None, final)
            return
        self._emit(self._pb.InferenceResponse(output_tensors=self._tensors(chunk)), final)

    def fail(self, error: BackendError) -> None:
        self._emit(self._pb.InferenceResponse(error=triton_error(self._pb, error)), True)

    def is_cancelled(self) -> bool:
        with self._lock:
            return self._closed or bool(self._sender.is_cancelled())

    def _tensors(self, chunk: OutputChunk) -> list[Any]:
        tensor = self._pb.Tensor
        generation = self.generation
        tensors = [
            tensor("text_output", np.array([t.encode("utf-8") for t in chunk.texts], dtype=np.object_))
        ]
        if generation is not None and generation.return_finish_reason:
            reasons = [r.encode("utf-8") for r in chunk.finish_reasons]
            tensors.append(tensor("finish_reason", np.array(reasons, dtype=np.object_)))
        if generation is not None and generation.return_num_input_tokens:
            tensors.append(tensor("num_input_tokens", np.array([chunk.num_input_tokens], dtype=np.uint32)))
        if generation is not None and generation.return_num_output_tokens:
            tensors.append(tensor("num_output_tokens", np.array(chunk.num_output_tokens, dtype=np.uint32)))
        if generation is not None and generation.return_cumulative_logprob:
            tensors.append(tensor("cumulative_logprob",
                                  np.array(chunk.cumulative_logprobs, dtype=np.float32)))
        if generation is not None and generation.return_logprobs:
            tensors.append(tensor("logprobs", np.array([text.encode("utf-8") for text in chunk.logprobs],
                                                       dtype=np.object_)))
        if chunk.prompt_logprobs is not None:
            tensors.append(tensor("prompt_logprobs",
                                  np.array([chunk.prompt_logprobs.encode("utf-8")], dtype=np.object_)))
        return tensors
