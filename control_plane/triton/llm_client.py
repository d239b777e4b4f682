"""A small streaming client for models served by this backend (or Triton's stock vLLM backend):
the stock tensor interface over gRPC streaming, with per-request timing. Used by the gRPC example,
the tests and the benchmarks."""

from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient


def stock_inputs(prompt: str, sampling: dict[str, Any] | None = None, stream: bool = True,
                 exclude_input: bool | None = None, returns: bool = True,
                 module: Any = grpcclient) -> list[Any]:
    """Inputs as a client of Triton's stock vLLM backend builds them (shape [1] each)."""
    def tensor(name: str, value: Any, dtype: str) -> Any:
        t = module.InferInput(name, [1], dtype)
        t.set_data_from_numpy(np.array([value], dtype=np.object_ if dtype == "BYTES" else bool))
        return t

    inputs = [tensor("text_input", prompt.encode(), "BYTES"), tensor("stream", stream, "BOOL")]
    if sampling is not None:
        inputs.append(tensor("sampling_parameters", json.dumps(sampling).encode(), "BYTES"))
    if exclude_input is not None:
        inputs.append(tensor("exclude_input_in_output", exclude_input, "BOOL"))
    if returns:
        for name in ("return_finish_reason", "return_num_input_tokens", "return_num_output_tokens"):
            inputs.append(tensor(name, True, "BOOL"))
    return inputs


@dataclass
class StreamResult:
    texts: list[str] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    num_input_tokens: int | None = None
    num_output_tokens: int = 0
    error: str | None = None
    error_status: str | None = None
    final: bool = False
    submitted_at: float = 0.0
    first_token_at: float | None = None
    done_at: float | None = None

    @property
    def text(self) -> str:
        return "".join(self.texts)


def record_response(result: StreamResult, item: Any, error: Any) -> bool:
    """Add one streamed gRPC response (or error) to ``result``; True when the request is over."""
    if error is not None:
        result.error = str(error)
        result.error_status = getattr(error, "status", lambda: None)()
        result.done_at = time.monotonic()
        return True
    response = item.get_response()
    text = item.as_numpy("text_output")
    if text is not None and text.size:
        if result.first_token_at is None:
            result.first_token_at = time.monotonic()
        result.texts.append(b"".join(text.tolist()).decode())
        reasons = item.as_numpy("finish_reason")
        if reasons is not None:
            result.finish_reasons.extend(r.decode() for r in reasons.tolist())
        counts = item.as_numpy("num_input_tokens")
        if counts is not None:
            result.num_input_tokens = int(counts[0])
        out_counts = item.as_numpy("num_output_tokens")
        if out_counts is not None:
            result.num_output_tokens += int(out_counts.sum())
    if response.parameters["triton_final_response"].bool_param:
        result.final = True
        result.done_at = time.monotonic()
        return True
    return False


class GrpcStream:
    """One gRPC stream (one client each, as tritonclient allows one stream per client)."""

    def __init__(self, url: str, model: str) -> None:
        self.model = model
        self.client = grpcclient.InferenceServerClient(url)
        self._events: queue.Queue[tuple[Any, Any]] = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self._events.put((result, error)))
        self.result = StreamResult()
        self._reader: threading.Thread | None = None

    def submit(self, prompt: str, sampling: dict[str, Any], priority: int = 0,
               timeout_us: int | None = None, stream: bool = True,
               parameters: dict[str, Any] | None = None) -> None:
        # A stream may carry one request after another; each gets a fresh result.
        self.result = StreamResult(submitted_at=time.monotonic())
        kwargs: dict[str, Any] = {"priority": priority, "parameters": parameters}
        if timeout_us is not None:
            kwargs["timeout"] = timeout_us
        self.client.async_stream_infer(
            self.model, stock_inputs(prompt, sampling, stream=stream),
            enable_empty_final_response=True, **kwargs,
        )
        self.start_reader()

    def start_reader(self) -> None:
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        result = self.result
        while True:
            item, error = self._events.get()
            if record_response(result, item, error):
                return

    def wait(self, timeout: float) -> StreamResult:
        assert self._reader is not None
        self._reader.join(timeout)
        return self.result

    def close(self, cancel: bool = False) -> None:
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()
