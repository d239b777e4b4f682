"""Triton's (KServe v2) gRPC protocol at the gateway: ``ModelStreamInfer`` with the stock vLLM
backend's tensors, model ready/metadata/config and server health, so ``tritonclient`` works
unchanged. Repository, shared-memory, trace, logging and statistics RPCs are not served."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg

from gateway.auth import RESERVED_PARAMETERS, bearer_key
from gateway.backend_parameters import BACKEND_PRIORITY, PRIORITY_NAMES, for_backend
from gateway.errors import BadRequest, GatewayError, NoNodeAvailable, NotServed
from gateway.kserve_http import SERVER_NAME, parse_max_tokens, parse_truncate
from gateway.lora import LORA_NAME, SAMPLING_INPUT, check_lora_name, sampling_json_with_lora_name
from gateway.prompt_tokens import INPUT_FORMAT, Prompt, is_chat
from gateway.routing.table import Endpoint, Route, Tenant
from gateway.service import Gateway
from gateway.token_counts import TokenTally, ask_counts_grpc, read_grpc
from gateway.upstream_http import ATTEMPTS, node_unavailable

log = logging.getLogger("gateway.grpc")
PROTOCOL = "kserve_grpc"
EMPTY_FINAL = "triton_enable_empty_final_response"
FINAL = "triton_final_response"
# A BYTES tensor element on the wire: a 4-byte length, then the bytes.
BYTES_PREFIX = 4
NOT_SERVED = ("ModelStatistics", "RepositoryIndex", "RepositoryModelLoad",
              "RepositoryModelUnload", "SystemSharedMemoryStatus", "SystemSharedMemoryRegister",
              "SystemSharedMemoryUnregister", "CudaSharedMemoryStatus",
              "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister", "TraceSetting",
              "LogSettings")


def _parameter_value(parameter: Any) -> Any:
    kind = parameter.WhichOneof("parameter_choice")
    return None if kind is None else getattr(parameter, kind)


def prepare_request(gateway: Gateway, route: Route, tenant: Tenant,
                    request: pb.ModelInferRequest) -> pb.ModelInferRequest:
    """The request the node gets: priority as the tenant may have it, under the name the backend
    sees (Triton consumes gRPC's ``priority`` itself), the gateway's tenant parameters and the
    adapter the model name selects."""
    # The same decision as over HTTP, on the parameters' plain values (0 is tritonclient's
    # "no priority").
    given = {name: _parameter_value(request.parameters[name])
             for name in (*PRIORITY_NAMES, *RESERVED_PARAMETERS) if name in request.parameters}
    decided = for_backend({k: v for k, v in given.items() if v not in (0, None)}, tenant,
                          gateway.gateway_secret)
    gateway.check_prompt_bytes(route, request_prompt(request), "text_input")
    prepared = pb.ModelInferRequest()
    prepared.CopyFrom(request)
    for name in PRIORITY_NAMES:
        if name in prepared.parameters:
            del prepared.parameters[name]
    if BACKEND_PRIORITY in decided:
        prepared.parameters[BACKEND_PRIORITY].int64_param = decided[BACKEND_PRIORITY]
    for name in RESERVED_PARAMETERS & decided.keys():
        prepared.parameters[name].string_param = str(decided[name])
    if route.adapter is not None:
        select_adapter(prepared, route.adapter)
    # Always asked of the node, so the gateway knows when each request is done.
    prepared.parameters[EMPTY_FINAL].bool_param = True
    return prepared


def request_prompt_bytes(request: pb.ModelInferRequest) -> int:
    for index, tensor in enumerate(request.inputs):
        if tensor.name == "text_input":
            if index < len(request.raw_input_contents):
                return max(0, len(request.raw_input_contents[index]) - BYTES_PREFIX)
            return sum(len(item) for item in tensor.contents.bytes_contents)
    return 0


def request_prompt(request: pb.ModelInferRequest) -> Prompt:
    """``text_input`` as the backend reads it (one UTF-8 string), with the input format and
    truncation the request asks for."""
    chat = INPUT_FORMAT in request.parameters and \
        is_chat(_parameter_value(request.parameters[INPUT_FORMAT]))
    truncate = parse_truncate(request_sampling(request).get("truncate_prompt_tokens"))
    for index, tensor in enumerate(request.inputs):
        if tensor.name == "text_input":
            try:
                text: str | None = _one_string(request, index)
            except BadRequest:
                text = None  # the backend refuses it, naming the field
            return Prompt(text, request_prompt_bytes(request), chat, truncate)
    return Prompt(None, 0, chat, truncate)


def request_sampling(request: pb.ModelInferRequest) -> dict[str, Any]:
    """Where the backend reads sampling parameters: the sampling_parameters input's JSON, else
    the request parameters ({} when the input is not a JSON object: the backend refuses it,
    naming the field)."""
    for index, tensor in enumerate(request.inputs):
        if tensor.name == SAMPLING_INPUT:
            try:
                sampling = json.loads(_one_string(request, index) or "{}")
            except (BadRequest, json.JSONDecodeError):
                return {}
            return sampling if isinstance(sampling, dict) else {}
    return {name: _parameter_value(value) for name, value in request.parameters.items()}


def request_max_tokens(request: pb.ModelInferRequest) -> int | None:
    """The output tokens asked for (None: the backend's default)."""
    return parse_max_tokens(request_sampling(request).get("max_tokens"))


def select_adapter(request: pb.ModelInferRequest, adapter: str) -> None:
    """Set ``lora_name`` where the backend reads it: the ``sampling_parameters`` input's JSON
    when the request has that input, else a string request parameter."""
    given = (_parameter_value(request.parameters[LORA_NAME])
             if LORA_NAME in request.parameters else None)
    check_lora_name(given, adapter, f"parameters.{LORA_NAME}")
    for index, tensor in enumerate(request.inputs):
        if tensor.name == SAMPLING_INPUT:
            text = sampling_json_with_lora_name(_one_string(request, index), adapter)
            _set_one_string(request, index, text.encode())
            return
    request.parameters[LORA_NAME].string_param = adapter


def _one_string(request: pb.ModelInferRequest, index: int) -> str:
    """The one element of BYTES input ``index`` (raw contents, as tritonclient sends, or typed)."""
    name = request.inputs[index].name
    if index < len(request.raw_input_contents):
        raw = request.raw_input_contents[index]
        size = int.from_bytes(raw[:BYTES_PREFIX], "little")
        elements = [raw[BYTES_PREFIX:]] if len(raw) == BYTES_PREFIX + size else []
    else:
        elements = list(request.inputs[index].contents.bytes_contents)
    if len(elements) != 1:
        raise BadRequest(f"{name} must be one string (a JSON object), not a batch")
    try:
        return elements[0].decode()
    except UnicodeDecodeError:
        raise BadRequest(f"{name} is not UTF-8 text; send a JSON object string") from None


def _set_one_string(request: pb.ModelInferRequest, index: int, value: bytes) -> None:
    if index < len(request.raw_input_contents):
        request.raw_input_contents[index] = len(value).to_bytes(BYTES_PREFIX, "little") + value
    else:
        request.inputs[index].contents.bytes_contents[0] = value


def stream_error_message(error: GatewayError) -> str:
    """A request's error inside a stream (no status code of its own): a refusal by a limit
    names its gRPC code, as a unary call would carry it."""
    if error.retry_after_s is not None:
        return f"{error.grpc_code}: {error.message}"
    return error.message


def error_response(request: pb.ModelInferRequest, message: str) -> pb.ModelStreamInferResponse:
    return pb.ModelStreamInferResponse(
        error_message=message,
        infer_response=pb.ModelInferResponse(id=request.id, model_name=request.model_name))


class _NodeRefused(Exception):
    pass


class InferenceService(pbg.GRPCInferenceServiceServicer):
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self._channels: dict[str, grpc.aio.Channel] = {}

    def stub(self, endpoint: Endpoint) -> pbg.GRPCInferenceServiceStub:
        channel = self._channels.get(endpoint.grpc_url)
        if channel is None:
            channel = grpc.aio.insecure_channel(endpoint.grpc_url, options=[
                ("grpc.max_send_message_length", self.gateway.settings.max_body_bytes),
                ("grpc.max_receive_message_length", -1)])
            self._channels[endpoint.grpc_url] = channel
        return pbg.GRPCInferenceServiceStub(channel)

    def _tenant(self, context: grpc.aio.ServicerContext) -> Tenant:
        metadata = {key: value for key, value in context.invocation_metadata() or ()}
        return self.gateway.caller(bearer_key(metadata.get("authorization")))

    @staticmethod
    async def _abort(context: grpc.aio.ServicerContext, error: GatewayError) -> None:
        await context.abort(grpc.StatusCode[error.grpc_code], error.message)

    async def ServerLive(self, request: Any, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.gateway.watcher.loaded.is_set())

    async def ServerMetadata(self, request: Any, context: Any) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name=SERVER_NAME, version="1")

    async def _forward(self, context: Any, name: str, call: Any) -> Any:
        """A metadata RPC answered by one node serving ``name`` (another if the first is down)."""
        try:
            route = self.gateway.route_for(self._tenant(context), name)
            tried: frozenset[str] = frozenset()
            for _ in range(ATTEMPTS):
                endpoint = self.gateway.pick(route, tried)
                tried |= {endpoint.http_url}
                try:
                    return await call(self.stub(endpoint), endpoint.triton_model)
                except grpc.aio.AioRpcError as exc:
                    if exc.code() != grpc.StatusCode.UNAVAILABLE:
                        await context.abort(exc.code(), exc.details() or "")
                    self.gateway.node_failed(endpoint, f"gRPC {exc.code().name}")
            raise NoNodeAvailable(f"model '{name}': no node answered; retry shortly")
        except GatewayError as error:
            await self._abort(context, error)

    async def ModelReady(self, request: pb.ModelReadyRequest, context: Any
                         ) -> pb.ModelReadyResponse:
        try:
            route = self.gateway.route_for(self._tenant(context), request.name)
        except NoNodeAvailable:
            return pb.ModelReadyResponse(ready=False)
        except GatewayError as error:
            await self._abort(context, error)
        if not route.endpoints:
            return pb.ModelReadyResponse(ready=False)
        return await self._forward(context, request.name, lambda stub, name: stub.ModelReady(
            pb.ModelReadyRequest(name=name, version=request.version), timeout=10))

    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Any
                            ) -> pb.ModelMetadataResponse:
        return await self._forward(context, request.name, lambda stub, name: stub.ModelMetadata(
            pb.ModelMetadataRequest(name=name, version=request.version), timeout=10))

    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Any
                          ) -> pb.ModelConfigResponse:
        return await self._forward(context, request.name, lambda stub, name: stub.ModelConfig(
            pb.ModelConfigRequest(name=name, version=request.version), timeout=10))

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        await self._abort(context, NotServed(
            "ModelInfer is not served: the LLM models are decoupled; use ModelStreamInfer "
            "(tritonclient: start_stream + async_stream_infer)"))

    async def ModelStreamInfer(self, request_iterator: AsyncIterator[pb.ModelInferRequest],
                               context: Any) -> AsyncIterator[pb.ModelStreamInferResponse]:
        try:
            tenant = self._tenant(context)
        except GatewayError as error:
            await self._abort(context, error)
            return
        out: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        tasks: set[asyncio.Task[None]] = set()
        reading_done = asyncio.Event()

        async def read_requests() -> None:
            try:
                async for request in request_iterator:
                    task = asyncio.create_task(self._one(request, tenant, out))
                    tasks.add(task)
                    task.add_done_callback(lambda t: (tasks.discard(t), out.put_nowait(None)))
            finally:
                reading_done.set()
                out.put_nowait(None)

        reader = asyncio.create_task(read_requests())
        try:
            while True:
                response = await out.get()
                if response is not None:
                    yield response
                elif reading_done.is_set() and not tasks and out.empty():
                    break
        finally:
            reader.cancel()
            for task in list(tasks):
                task.cancel()

    async def _one(self, request: pb.ModelInferRequest, tenant: Tenant,
                   out: asyncio.Queue[pb.ModelStreamInferResponse | None]) -> None:
        """One request of a client's stream, on its own call to a node, so a retry or a
        failure touches no other request."""
        gateway = self.gateway
        received = time.monotonic()
        wants_empty_final = (EMPTY_FINAL in request.parameters
                             and request.parameters[EMPTY_FINAL].bool_param)
        try:
            route = gateway.route_for(tenant, request.model_name)
            prepared = prepare_request(gateway, route, tenant, request)
            grant = await gateway.admit(tenant, route, request_prompt(request),
                                        request_max_tokens(request))
        except GatewayError as error:
            await out.put(error_response(request, stream_error_message(error)))
            return
        tally = TokenTally()
        # Always: usage is counted for every tenant, limits or not.
        strip = ask_counts_grpc(prepared)
        tried: frozenset[str] = frozenset()
        errors: list[str] = []
        outcome = "failed"
        try:
            for attempt in range(ATTEMPTS):
                try:
                    endpoint = gateway.pick(route, tried)
                except NoNodeAvailable as error:
                    errors.append(error.message)
                    break
                tried |= {endpoint.http_url}
                if attempt:
                    gateway.metrics.retries.labels(PROTOCOL, route.name).inc()
                prepared.model_name = endpoint.triton_model
                answered = await self._on_node(endpoint, route, request, prepared,
                                               wants_empty_final, out, received, errors,
                                               tally, strip)
                if answered is not None:
                    outcome = answered
                    return
            await out.put(error_response(request, (
                f"model '{route.name}' failed on every node tried before its first response "
                f"({'; '.join(errors)}); retry shortly")))
        finally:
            gateway.metrics.requests.labels(PROTOCOL, route.name, tenant.name, outcome).inc()
            # A request cancelled or failed pays for what was generated until then (settled
            # out of this task, which a cancelled stream cancels).
            gateway.finish_later(gateway.settle(tenant, route, grant, tally.prompt or 0,
                                                tally.output))

    async def _on_node(self, endpoint: Endpoint, route: Route, request: pb.ModelInferRequest,
                       prepared: pb.ModelInferRequest, wants_empty_final: bool,
                       out: asyncio.Queue[pb.ModelStreamInferResponse | None], received: float,
                       errors: list[str], tally: TokenTally, strip: frozenset[str]
                       ) -> str | None:
        """The outcome once the node answered; None when it failed before its first response
        (the caller may retry elsewhere)."""
        gateway = self.gateway
        gateway.balancer.started(endpoint)
        call = self.stub(endpoint).ModelStreamInfer()
        answered = finished = False
        tokens = gateway.metrics.output_tokens.labels(PROTOCOL, route.name, "")
        try:
            await call.write(prepared)
            while not finished:
                timeout = None if answered else gateway.settings.first_response_timeout_seconds
                response = await asyncio.wait_for(call.read(), timeout)
                if response is grpc.aio.EOF:
                    raise _NodeRefused("the node ended the stream before the final response")
                message = response.error_message
                if not answered and message and node_unavailable(400, message):
                    raise _NodeRefused(message)
                if not answered:
                    gateway.metrics.ttft.labels(PROTOCOL, route.name).observe(
                        time.monotonic() - received)
                answered = True
                infer = response.infer_response
                finished = bool(message) or infer.parameters[FINAL].bool_param
                response.infer_response.model_name = request.model_name
                read_grpc(infer, tally, strip)
                if infer.outputs:
                    tokens.inc()
                if message or infer.outputs or wants_empty_final or not finished:
                    await out.put(response)
            await call.done_writing()
            # Read to the end rather than cancel: a cancel right after the final response keeps
            # r24.10 from unloading the model later (README, design notes).
            await call.code()
            return "ok"
        except TimeoutError:
            call.cancel()
            await out.put(error_response(request, (
                f"no response from {route.name} within "
                f"{gateway.settings.first_response_timeout_seconds:.0f} s (queued on node "
                f"{endpoint.node}); retry later or with a more urgent priority")))
            return "timeout"
        except (grpc.aio.AioRpcError, _NodeRefused) as exc:
            call.cancel()
            detail = (f"gRPC {exc.code().name}: {exc.details()}"
                      if isinstance(exc, grpc.aio.AioRpcError) else str(exc))
            if answered:
                await out.put(error_response(request, (
                    f"the node serving this request ({endpoint.node}) failed mid-stream "
                    f"({detail}); the output so far is incomplete: retry the request")))
                gateway.node_failed(endpoint, detail)
                return "failed"
            gateway.node_failed(endpoint, detail)
            errors.append(f"{endpoint.node}: {detail}")
            return None
        except asyncio.CancelledError:
            if not finished:
                call.cancel()
            raise
        finally:
            gateway.balancer.finished(endpoint)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()


def _not_served(name: str) -> Any:
    async def refuse(self: InferenceService, request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, (
            f"{name} is not served by the inference gateway: repository, shared-memory, trace, "
            "logging and statistics RPCs stay inside; operators use the control plane's admin "
            "API"))
    refuse.__name__ = name
    return refuse


for _name in NOT_SERVED:
    setattr(InferenceService, _name, _not_served(_name))
