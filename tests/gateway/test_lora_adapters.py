"""LoRA adapters by served name, ``M:<adapter>``: the routing table's ``adapters``, resolving the
name to the nodes where the adapter is loaded, and ``lora_name`` where each protocol's backend
request reads it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.testclient import TestClient
from tritonclient.grpc import service_pb2 as pb

from gateway.auth import key_hash
from gateway.errors import BadRequest, ModelNotFound, NoNodeAvailable, PermissionDenied
from gateway.grpc_service import prepare_request
from gateway.http_app import create_app
from gateway.kserve_http import generate_body
from gateway.lora import generate_document_with_lora_name
from gateway.openai_translate import model_list, parse_chat, parse_completion
from gateway.routing.balancer import Balancer
from gateway.routing.table import RoutingTable, parse_table
from gateway.service import Gateway
from gateway.settings import GatewaySettings, RoutingPolicy
from gateway.upstream_http import HttpUpstream


def endpoint(node: str, *adapters: str) -> dict[str, Any]:
    return {"node": node, "http_url": f"{node}:1", "grpc_url": f"{node}:2", "triton_model": "m",
            "adapters": list(adapters)}


DOCUMENT = {
    "revision": "r1",
    "models": [
        {"name": "m", "model": "m", "alias": "production", "version": 1, "max_model_len": 64,
         "endpoints": [endpoint("a", "sql", "chat"), endpoint("b", "sql"), endpoint("c")]},
        {"name": "m.canary", "model": "m", "alias": "canary", "version": 2,
         "max_model_len": 64, "endpoints": [endpoint("d")]},
        {"name": "down", "model": "down", "alias": "production", "version": 1,
         "max_model_len": None, "endpoints": []},
        {"name": "x", "model": "x", "alias": "production", "version": 1,
         "max_model_len": None, "endpoints": [endpoint("e", "legal")]},
    ],
    "tenants": [
        {"name": "acme", "enabled": True, "allowed_models": ["*"], "key_hashes": [
            key_hash("acme-key")]},
        {"name": "only-m", "enabled": True, "allowed_models": ["m"], "key_hashes": [
            key_hash("m-key")]},
    ],
}
TABLE = parse_table(DOCUMENT)
ACME, ONLY_M = TABLE.tenants["acme"], TABLE.tenants["only-m"]


def gateway(table: RoutingTable = TABLE) -> Gateway:
    serving = Gateway(GatewaySettings(gateway_secret="s3cret", _env_file=None))  # type: ignore[call-arg]
    serving.watcher.table = table
    serving.watcher.loaded.set()
    return serving


# The routing table.

def test_adapters_are_parsed_per_endpoint_and_absent_means_none() -> None:
    route = TABLE.route("m")
    assert route is not None
    assert [sorted(e.adapters) for e in route.endpoints] == [["chat", "sql"], ["sql"], []]
    assert route.adapters() == ["chat", "sql"]
    older = {**DOCUMENT, "models": [{**DOCUMENT["models"][0], "endpoints": [  # type: ignore[dict-item]
        {k: v for k, v in endpoint("a", "sql").items() if k != "adapters"},
        {**endpoint("b"), "adapters": None}]}]}
    old_route = parse_table(older).route("m")
    assert old_route is not None and old_route.adapters() == []


def test_adapters_that_are_not_a_list_of_names_make_the_table_malformed() -> None:
    bad = {**DOCUMENT, "models": [{**DOCUMENT["models"][0],  # type: ignore[dict-item]
                                   "endpoints": [{**endpoint("a"), "adapters": "sql"}]}]}
    with pytest.raises(ValueError, match="adapters must be a list of names"):
        parse_table(bad)


def test_an_adapter_loading_keeps_the_endpoints_balancer_state() -> None:
    before = TABLE.route("m")
    after = parse_table({**DOCUMENT, "models": [{**DOCUMENT["models"][0],  # type: ignore[dict-item]
                                                 "endpoints": [endpoint("c", "new")]}]}).route("m")
    assert before is not None and after is not None
    chooser = Balancer(RoutingPolicy.LEAST_LOADED, 1.0, 8.0)
    chooser.update(set(before.endpoints))
    chooser.recovered(before.endpoints[2])
    chooser.update(set(after.endpoints))
    assert not chooser.state(after.endpoints[0]).ejected(now=0), "no probation for an adapter"


# Resolving a served name.

@pytest.mark.parametrize(("name", "served", "nodes"), [
    ("m:sql", "m:sql", ["a", "b"]),
    ("m:chat", "m:chat", ["a"]),
    ("m.production:sql", "m:sql", ["a", "b"]),
    ("m", "m", ["a", "b", "c"]),
])
def test_an_adapter_name_routes_to_the_nodes_where_it_is_loaded(name: str, served: str,
                                                                nodes: list[str]) -> None:
    route = gateway().route_for(ACME, name)
    assert route.name == served and [e.node for e in route.endpoints] == nodes
    assert route.adapter == (name.split(":")[1] if ":" in name else None)
    assert route.model == "m" and route.max_model_len == 64


def test_an_adapter_loaded_nowhere_is_not_found_naming_those_that_are() -> None:
    with pytest.raises(ModelNotFound, match=r"adapter 'sqll' is not loaded for model 'm' on any "
                       r"node; did you mean m:sql\? \(loaded for m: chat, sql\)"):
        gateway().route_for(ACME, "m:sqll")
    with pytest.raises(ModelNotFound, match=r"\(loaded for m.canary: none\); ask an operator"):
        gateway().route_for(ACME, "m.canary:sql")
    with pytest.raises(ModelNotFound, match="model 'nope' is not served here"):
        gateway().route_for(ACME, "nope:sql")
    with pytest.raises(BadRequest, match="names no adapter"):
        gateway().route_for(ACME, "m:")


def test_a_model_no_node_serves_is_unavailable_with_or_without_an_adapter() -> None:
    serving = gateway()
    route = serving.route_for(ACME, "down:sql")
    with pytest.raises(NoNodeAvailable, match="'down:sql' is unavailable: no node serves it"):
        serving.pick(route, frozenset())


def test_a_tenant_allowed_the_model_may_use_its_adapters_and_no_other() -> None:
    assert gateway().route_for(ONLY_M, "m:sql").name == "m:sql"
    with pytest.raises(PermissionDenied, match="may not use model 'x'"):
        gateway().route_for(ONLY_M, "x:legal")
    with pytest.raises(PermissionDenied, match="may not use model 'x'"):
        gateway().route_for(ONLY_M, "x:unknown")  # refused before its adapters are listed


def test_picks_are_counted_under_the_adapter_name() -> None:
    serving = gateway()
    serving.pick(serving.route_for(ACME, "m:chat"), frozenset())
    assert serving.metrics.registry.get_sample_value(
        "llmgw_node_picks_total", {"node": "a", "model": "m:chat"}) == 1


# lora_name in what the backend gets.

def test_http_generate_gets_lora_name_in_its_parameters() -> None:
    serving = gateway()
    route = serving.route_for(ACME, "m:sql")
    body = json.loads(generate_body(serving, route, ACME, {"text_input": "q",
                                                           "parameters": {"max_tokens": 4}}))
    assert body["parameters"] == {"max_tokens": 4, "lora_name": "sql", "tenant": "acme",
                                  "gateway_secret": "s3cret"}
    plain = json.loads(generate_body(serving, serving.route_for(ACME, "m"), ACME,
                                     {"text_input": "q"}))
    assert "lora_name" not in plain["parameters"]


@pytest.mark.parametrize("wrap", [lambda s: s, lambda s: [s]])
def test_http_generate_with_a_sampling_input_gets_lora_name_in_its_json(wrap: Any) -> None:
    sent = {"text_input": "q", "sampling_parameters": wrap('{"temperature": 0}'),
            "parameters": {}}
    body = generate_document_with_lora_name(sent, "sql")
    value = body["sampling_parameters"]
    text = value if isinstance(value, str) else value[0]
    assert json.loads(text) == {"temperature": 0, "lora_name": "sql"}
    assert body["parameters"] == {}
    empty = generate_document_with_lora_name({**sent, "sampling_parameters": ""}, "sql")
    assert json.loads(empty["sampling_parameters"]) == {"lora_name": "sql"}


@pytest.mark.parametrize(("document", "message"), [
    ({"parameters": {"lora_name": "other"}},
     r'^parameters.lora_name is "other" but the model name selects adapter \'sql\''),
    ({"sampling_parameters": '{"lora_name": "other"}'},
     '^sampling_parameters.lora_name is "other"'),
    ({"sampling_parameters": "{}", "parameters": {"lora_name": "other"}},
     "^parameters.lora_name"),
    ({"sampling_parameters": "[1]"}, "must be a JSON object string, got list"),
    ({"sampling_parameters": "{"}, "is not valid JSON"),
    ({"sampling_parameters": {"temperature": 0}}, "must be a JSON object string"),
])
def test_http_generate_refuses_a_different_lora_name(document: dict[str, Any],
                                                     message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        generate_document_with_lora_name({"text_input": "q", "parameters": {}, **document},
                                         "sql")
    same = {"parameters": {"lora_name": "sql"}}
    assert generate_document_with_lora_name(same, "sql")["parameters"] == {"lora_name": "sql"}


def grpc_request(sampling: str | None = None, raw: bool = True, **parameters: str
                 ) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m:sql")
    prompt = request.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    texts = [b"q"] if sampling is None else [b"q", sampling.encode()]
    if sampling is not None:
        request.inputs.add(name="sampling_parameters", datatype="BYTES", shape=[1])
    if raw:
        request.raw_input_contents.extend(len(t).to_bytes(4, "little") + t for t in texts)
    else:
        prompt.contents.bytes_contents.append(b"q")
        if sampling is not None:
            request.inputs[1].contents.bytes_contents.append(sampling.encode())
    for name, value in parameters.items():
        request.parameters[name].string_param = value
    return request


def test_grpc_gets_lora_name_as_a_request_parameter() -> None:
    serving = gateway()
    prepared = prepare_request(serving, serving.route_for(ACME, "m:sql"), ACME, grpc_request())
    assert prepared.parameters["lora_name"].string_param == "sql"
    assert prepared.parameters["tenant"].string_param == "acme"
    plain = prepare_request(serving, serving.route_for(ACME, "m"), ACME, grpc_request())
    assert "lora_name" not in plain.parameters


@pytest.mark.parametrize("raw", [True, False])
def test_grpc_with_a_sampling_input_gets_lora_name_in_its_json(raw: bool) -> None:
    serving = gateway()
    prepared = prepare_request(serving, serving.route_for(ACME, "m:sql"), ACME,
                               grpc_request('{"temperature": 0}', raw=raw))
    if raw:
        element = prepared.raw_input_contents[1]
        assert int.from_bytes(element[:4], "little") == len(element) - 4
        text = element[4:]
        assert prepared.raw_input_contents[0] == b"\x01\x00\x00\x00q"
    else:
        text = prepared.inputs[1].contents.bytes_contents[0]
    assert json.loads(text) == {"temperature": 0, "lora_name": "sql"}
    assert "lora_name" not in prepared.parameters


def test_grpc_refuses_a_different_lora_name() -> None:
    serving = gateway()
    route = serving.route_for(ACME, "m:sql")
    with pytest.raises(BadRequest, match='parameters.lora_name is "other"'):
        prepare_request(serving, route, ACME, grpc_request(lora_name="other"))
    with pytest.raises(BadRequest, match='sampling_parameters.lora_name is "other"'):
        prepare_request(serving, route, ACME, grpc_request('{"lora_name": "other"}'))
    same = prepare_request(serving, route, ACME, grpc_request(lora_name="sql"))
    assert same.parameters["lora_name"].string_param == "sql"


def test_openai_sends_lora_name_in_the_sampling_parameters() -> None:
    request = parse_completion({"model": "m:sql", "prompt": "q", "temperature": 0})
    body = request.backend_body(0, {**request.parameters, "lora_name": "sql",
                                    "priority_level": 2})
    assert json.loads(body["sampling_parameters"]) == {"temperature": 0, "max_tokens": 16,
                                                       "lora_name": "sql"}
    assert body["parameters"] == {"priority_level": 2}
    chat = parse_chat({"model": "m:sql", "messages": [{"role": "user", "content": "q"}]})
    assert chat.model == "m:sql", "answers name the model as the client did"


def test_openai_model_list_has_each_loaded_adapter_for_the_tenants_models() -> None:
    everything = [model["id"] for model in model_list(TABLE.routes.values(), ACME)["data"]]
    assert everything == ["down", "m", "m:chat", "m:sql", "m.canary", "x", "x:legal"]
    listed = model_list(TABLE.routes.values(), ONLY_M)["data"]
    assert [model["id"] for model in listed] == ["m", "m:chat", "m:sql", "m.canary"]
    assert listed[1] == {"id": "m:chat", "object": "model", "created": 0, "owned_by": "m",
                         "parent": "m"}
    assert "parent" not in listed[0]


# The HTTP app: a model name with a colon in the URL path.

def test_http_paths_take_an_adapter_name() -> None:
    serving = gateway()
    client = TestClient(create_app(serving, HttpUpstream(serving)),
                        headers={"Authorization": "Bearer acme-key"})
    missing = client.get("/v2/models/m:sqll/ready")
    assert missing.status_code == 404 and "did you mean m:sql?" in missing.json()["error"]
    assert client.get("/v2/models/m%3Asqll").status_code == 404, "an encoded colon too"
    refused = client.post("/v2/models/m:sql/generate",
                          json={"text_input": "q", "parameters": {"lora_name": "chat"}})
    assert refused.status_code == 400
    assert "model name selects adapter 'sql'" in refused.json()["error"]
    listed = client.get("/v1/models", headers={"Authorization": "Bearer m-key"})
    assert "m:sql" in [model["id"] for model in listed.json()["data"]]
    openai = client.post("/v1/completions", json={"model": "m:nope", "prompt": "q"})
    assert openai.status_code == 404 and openai.json()["error"]["code"] == "ModelNotFound"
