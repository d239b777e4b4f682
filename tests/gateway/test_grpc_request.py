"""A gRPC request as the node gets it from the gateway: the same priority decision as HTTP."""

from __future__ import annotations

import pytest
from tritonclient.grpc import service_pb2 as pb

from gateway.errors import BadRequest, PermissionDenied
from gateway.grpc_service import prepare_request
from gateway.routing.table import Route, Tenant
from gateway.service import Gateway
from gateway.settings import GatewaySettings

ROUTE = Route(name="m", model="m", alias="production", version=1, max_model_len=8,
              endpoints=())
TENANT = Tenant(name="acme", enabled=True, allowed_models=frozenset({"*"}),
                max_priority_level=2)


def request(**parameters: int | str) -> pb.ModelInferRequest:
    sent = pb.ModelInferRequest(model_name="m")
    for name, value in parameters.items():
        if isinstance(value, str):
            sent.parameters[name].string_param = value
        else:
            sent.parameters[name].uint64_param = value
    return sent


def gateway() -> Gateway:
    return Gateway(GatewaySettings(gateway_secret="s3cret", _env_file=None))  # type: ignore[call-arg]


def test_grpc_priority_becomes_the_backend_level_with_the_tenant() -> None:
    prepared = prepare_request(gateway(), ROUTE, TENANT, request(priority=3))
    assert "priority" not in prepared.parameters
    assert prepared.parameters["priority_level"].int64_param == 3
    assert prepared.parameters["tenant"].string_param == "acme"
    assert prepared.parameters["gateway_secret"].string_param == "s3cret"
    assert prepared.parameters["triton_enable_empty_final_response"].bool_param
    unset = prepare_request(gateway(), ROUTE, TENANT, request(priority=0))
    assert "priority_level" not in unset.parameters, "0 is tritonclient's 'no priority'"


def test_grpc_requests_are_refused_as_http_ones_are() -> None:
    with pytest.raises(PermissionDenied, match="priority levels 2 and above"):
        prepare_request(gateway(), ROUTE, TENANT, request(priority=1))
    with pytest.raises(BadRequest, match="set by the gateway"):
        prepare_request(gateway(), ROUTE, TENANT, request(tenant="other"))
    with pytest.raises(BadRequest, match="disagree"):
        prepare_request(gateway(), ROUTE, TENANT, request(priority=2, priority_level="3"))
