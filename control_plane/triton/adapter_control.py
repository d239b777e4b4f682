"""``AdapterControl`` over Triton's gRPC streaming API (tritonclient): each control request is
one inference request with an empty prompt and the ``adapter_control`` request parameters, on a
stream of its own, answered by one response."""

from __future__ import annotations

import queue
import time
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from control_plane.triton.adapter_protocol import (
    AdapterAnswerError,
    AdapterListing,
    AdapterRequestRefused,
    parse_listing,
)
from control_plane.triton.llm_client import StreamResult, record_response
from control_plane.triton.node_control import repository_key
from control_plane.triton.protocol import NodeUnreachable
from control_plane.triton.specs import NodeEndpoint

# gRPC codes that mean no answer came from Triton itself.
_NO_ANSWER = {"StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED", "StatusCode.CANCELLED"}


class TritonAdapterControl:
    """The adapter control requests of one node; the repository key goes with each request (the
    backend refuses load and unload without it)."""

    def __init__(self, grpc_url: str, repository_key: str | None = None,
                 timeout_s: float = 120.0) -> None:
        """``timeout_s`` bounds one request: loading an adapter reads its weights (seconds)."""
        self.url = grpc_url
        self.repository_key = repository_key
        self.timeout_s = timeout_s

    def load(self, triton_name: str, name: str, path: str) -> AdapterListing:
        return self._request(triton_name, {"adapter_control": "load", "adapter_name": name,
                                           "adapter_path": path})

    def unload(self, triton_name: str, name: str) -> AdapterListing:
        return self._request(triton_name, {"adapter_control": "unload", "adapter_name": name})

    def list(self, triton_name: str) -> AdapterListing:
        return self._request(triton_name, {"adapter_control": "list"})

    def _request(self, triton_name: str, parameters: dict[str, Any]) -> AdapterListing:
        if self.repository_key is not None:
            parameters = {**parameters, "repository_key": self.repository_key}
        action = parameters["adapter_control"]
        events: queue.Queue[tuple[Any, Any]] = queue.Queue()
        result = StreamResult(submitted_at=time.monotonic())
        client = grpcclient.InferenceServerClient(self.url)
        try:
            client.start_stream(callback=lambda result, error: events.put((result, error)))
            text_input = grpcclient.InferInput("text_input", [1], "BYTES")
            text_input.set_data_from_numpy(np.array([b""], dtype=np.object_))
            client.async_stream_infer(triton_name, [text_input], parameters=parameters,
                                      enable_empty_final_response=True)
            deadline = time.monotonic() + self.timeout_s
            while True:
                try:
                    item, error = events.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise NodeUnreachable(self.url, f"no answer to the adapter {action} request "
                                          f"to '{triton_name}' within {self.timeout_s:g} s"
                                          ) from None
                if error is not None:
                    raise self._translate(error)
                if record_response(result, item, None):
                    break
        except InferenceServerException as exc:
            # A stream that broke before the request went out (the node refused the
            # connection) reports why through the callback; the exception only says it broke.
            try:
                _, reported = events.get(timeout=1.0)
            except queue.Empty:
                reported = None
            raise self._translate(reported or exc) from exc
        finally:
            # Only an unfinished request is cancelled: cancelling a finished gRPC stream leaves
            # the model unable to finish unloading on Triton r24.10 (README, design notes).
            client.stop_stream(cancel_requests=not result.final)
            client.close()
        try:
            return parse_listing(result.text)
        except AdapterAnswerError as exc:
            raise AdapterRequestRefused(f"'{triton_name}' on {self.url}: {exc}") from None

    def _translate(self, error: InferenceServerException) -> Exception:
        status = error.status() or ""
        message = (error.message() or str(error)).strip()
        if status in _NO_ANSWER:
            return NodeUnreachable(self.url, message)
        return AdapterRequestRefused(message)


def connect(endpoint: NodeEndpoint) -> TritonAdapterControl:
    return TritonAdapterControl(endpoint.grpc_url, repository_key=repository_key(endpoint))
