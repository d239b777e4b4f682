"""``TritonControl`` over Triton's gRPC API (tritonclient), with metrics read over HTTP."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Self, TypeVar

import httpx
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from control_plane.triton import restricted_api
from control_plane.triton.protocol import (
    IndexEntry,
    LoadRejected,
    ModelNotLoaded,
    ModelState,
    NodeUnreachable,
    RepositoryAccessDenied,
    TritonControlError,
)

T = TypeVar("T")

# gRPC codes that mean no answer came from Triton itself (tritonclient reports them as strings).
_NO_ANSWER = {"StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED", "StatusCode.CANCELLED"}
_DEADLINE_EXCEEDED = "StatusCode.DEADLINE_EXCEEDED"
_NOT_FOUND = "StatusCode.NOT_FOUND"
# Triton refuses a call without the repository key with UNAVAILABLE, the same code as a node that
# is down; only its message tells the two apart.
_RESTRICTED_MESSAGE = "This protocol is restricted"
# What Triton answers for any config it cannot parse or accept; the cause is only in its log.
_POLL_FAILED_MESSAGE = "failed to poll from model repository"
_POLL_FAILED_HINT = (
    "Triton gives no detail for a config it cannot parse or accept, such as an unknown field, "
    "a bad value or a name other than the model's; the node's log names the cause"
)
_CHANNEL_ARGS = [
    # As tritonclient sets them: load requests carry whole model files.
    ("grpc.max_send_message_length", grpcclient.MAX_GRPC_MESSAGE_SIZE),
    ("grpc.max_receive_message_length", grpcclient.MAX_GRPC_MESSAGE_SIZE),
    # gRPC's default reconnect backoff grows to 120 s, so a node back after an outage would look
    # down for minutes more; a restarted tritonserver answers within a fraction of a second.
    ("grpc.initial_reconnect_backoff_ms", 500),
    ("grpc.min_reconnect_backoff_ms", 500),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


class TritonGrpcControl:
    """One Triton node, driven over gRPC; ``close()`` it (or use it as a context manager)."""

    def __init__(self, grpc_url: str, metrics_url: str | None = None, *, repository_key: str | None = None,
                 call_timeout_s: float = 10.0, load_timeout_s: float = 600.0) -> None:
        """``load_timeout_s`` bounds one load: a vLLM engine takes ~30 s to start on a CPU and
        minutes for a large model on a GPU. ``call_timeout_s`` bounds every other call."""
        self.url = grpc_url
        self.metrics_url = metrics_url
        self.call_timeout_s = call_timeout_s
        self.load_timeout_s = load_timeout_s
        self._repository_headers = (
            None if repository_key is None else restricted_api.grpc_headers(repository_key)
        )
        self._client = grpcclient.InferenceServerClient(grpc_url, channel_args=_CHANNEL_ARGS)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def index(self) -> list[IndexEntry]:
        repository = self._call(lambda: self._client.get_model_repository_index(
            headers=self._repository_headers, client_timeout=self.call_timeout_s))
        entries = {
            (model.name, _version(model.version)): IndexEntry(
                name=model.name, version=_version(model.version),
                # A model directory Triton has never loaded has no state at all.
                state=_state(model.state) if model.state else ModelState.UNAVAILABLE,
                reason=model.reason,
            )
            for model in repository.models
        }
        # The repository index lists only models with a directory in the node's repository, so a
        # model loaded from config and files never appears there. Statistics list every ready
        # model version, whatever it was loaded from.
        statistics = self._call(lambda: self._client.get_inference_statistics(
            client_timeout=self.call_timeout_s))
        for stats in statistics.model_stats:
            version = _version(stats.version)
            entries.setdefault((stats.name, version),
                               IndexEntry(stats.name, version, ModelState.READY))
        return sorted(entries.values(), key=lambda e: (e.name, e.version or 0))

    def load(self, name: str, config_json: str, files: Mapping[str, bytes]) -> None:
        misnamed = [path for path in files if not path.startswith("file:")]
        if misnamed:
            raise ValueError(f"file keys must look like 'file:<version>/<path>', not {misnamed}")
        self._call(
            lambda: self._client.load_model(
                name, headers=self._repository_headers, config=config_json, files=dict(files),
                client_timeout=self.load_timeout_s),
            model=name, loading=True,
        )

    def unload(self, name: str) -> None:
        self._call(lambda: self._client.unload_model(
            name, headers=self._repository_headers, client_timeout=self.call_timeout_s))

    def is_server_live(self) -> bool:
        try:
            return bool(self._call(
                lambda: self._client.is_server_live(client_timeout=self.call_timeout_s)))
        except NodeUnreachable:
            return False

    def is_model_ready(self, name: str) -> bool:
        return bool(self._call(
            lambda: self._client.is_model_ready(name, client_timeout=self.call_timeout_s)))

    def metadata(self, name: str) -> dict[str, Any]:
        response: dict[str, Any] = self._call(
            lambda: self._client.get_model_metadata(
                name, as_json=True, client_timeout=self.call_timeout_s),
            model=name,
        )
        # Protobuf's JSON writes int64 as strings; give shapes as numbers, as Triton's HTTP API does.
        for tensor in (*response.get("inputs", []), *response.get("outputs", [])):
            tensor["shape"] = [int(dim) for dim in tensor.get("shape", [])]
        return response

    def server_version(self) -> str:
        metadata = self._call(lambda: self._client.get_server_metadata(
            client_timeout=self.call_timeout_s))
        return str(metadata.version)

    def metrics(self) -> str:
        if self.metrics_url is None:
            raise TritonControlError(f"no metrics URL is known for the node at {self.url}",
                                     self.url)
        try:
            response = httpx.get(self.metrics_url, timeout=self.call_timeout_s)
        except httpx.TransportError as exc:
            raise NodeUnreachable(self.metrics_url, f"{type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise TritonControlError(
                f"Triton node {self.metrics_url} answered HTTP {response.status_code}",
                self.metrics_url)
        return response.text

    def _call(self, call: Callable[[], T], *, model: str | None = None,
              loading: bool = False) -> T:
        """Run one tritonclient call and turn its failure into one of the protocol's errors."""
        try:
            return call()
        except InferenceServerException as exc:
            raise self._translate(exc, model, loading) from exc

    def _translate(self, exc: InferenceServerException, model: str | None,
                   loading: bool) -> TritonControlError:
        status = exc.status() or ""
        message = (exc.message() or str(exc)).strip().rstrip(";").strip()
        if message.startswith(_RESTRICTED_MESSAGE):
            return RepositoryAccessDenied(self.url, message)
        if status in _NO_ANSWER:
            if status == _DEADLINE_EXCEEDED:
                timeout = self.load_timeout_s if loading else self.call_timeout_s
                message = f"no answer within {timeout:g} s"
                if loading:
                    message += "; the load may still finish there (see index())"
            return NodeUnreachable(self.url, message)
        if loading and model is not None:
            hint = _POLL_FAILED_HINT if _POLL_FAILED_MESSAGE in message else ""
            return LoadRejected(self.url, model, message, hint)
        if model is not None and status == _NOT_FOUND:
            return ModelNotLoaded(self.url, model, message)
        return TritonControlError(f"Triton node {self.url} answered {status}: {message}", self.url)


def _version(text: str) -> int | None:
    return int(text) if text else None


def _state(text: str) -> ModelState:
    try:
        return ModelState(text)
    except ValueError:
        return ModelState.UNKNOWN
