"""LoRA adapters loaded into the running engine and chosen per request, against the real engine:
a node with a repository key, one model load, adapters made by ``make_random_adapter``.

The tests run in file order and share the node's adapter state; each says what it leaves loaded.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tritonclient.http as httpclient

from control_plane.demo_adapter import make_random_adapter
from control_plane.triton import restricted_api
from control_plane.triton.llm_client import GrpcStream, StreamResult
from control_plane.triton.model_config import model_json_bytes, read_model_json
from control_plane.triton.runtime import CACHE_DIR
from control_plane.triton.server import TritonServer
from tests.integration import support
from tests.integration.support import MODEL_DIR, wait_until

KEY = secrets.token_urlsafe(24)
MODEL = "smollm2-lora"
PROMPT = "The capital of France is"
GREEDY = {"max_tokens": 12, "temperature": 0}
# Long enough to still be running while an adapter loads (or unloads).
LONG = {"max_tokens": 48, "ignore_eos": True, "temperature": 0}
LONGER = {**LONG, "max_tokens": 96}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """A node whose repository API, and so adapter control, needs ``KEY``, serving the demo model
    with LoRA enabled (room for 6 requests at once, so 3 streams and the rest all run)."""
    server = TritonServer(tmp_path_factory.mktemp("lora-repository"), repository_key=KEY,
                          log_path=CACHE_DIR / "logs" / "test-lora-tritonserver.log")
    server.start()
    try:
        # Imported by module: pytest would collect a bare test_model_config as a test.
        config_json, _ = support.test_model_config()
        config = json.loads(config_json)
        # An unload waits for the adapter's 96-token stream: ~25 s on a slow 2-core machine with
        # LoRA, over the tests' usual 20 s drain.
        config["parameters"]["drain_timeout_seconds"] = {"string_value": "120"}
        config = json.dumps(config)
        engine_args = {**read_model_json(MODEL_DIR), "max_num_seqs": 7, "enable_lora": True,
                       "max_loras": 2, "max_lora_rank": 16}
        with httpclient.InferenceServerClient(server.http_url, network_timeout=600) as client:
            client.load_model(MODEL, config=config,
                              files={"file:1/model.json": model_json_bytes(engine_args)},
                              headers=restricted_api.http_headers(KEY))
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    # Strong enough that each answers differently from the first token on (a weaker one may
    # agree with the base model for a while, and so hide whose answer a request got).
    root = tmp_path_factory.mktemp("adapters")
    return {"a": make_random_adapter(root / "a", rank=8, seed=1, scale=0.1),
            "b": make_random_adapter(root / "b", rank=16, seed=2, scale=0.1,
                                     target_modules=("q_proj", "v_proj", "o_proj", "down_proj")),
            "big": make_random_adapter(root / "big", rank=32, seed=3)}


def start(node: TritonServer, sampling: dict[str, Any], prompt: str = PROMPT,
          parameters: dict[str, Any] | None = None) -> GrpcStream:
    stream = GrpcStream(node.grpc_url, MODEL)
    stream.submit(prompt, sampling, parameters=parameters)
    return stream


def finish(stream: GrpcStream, timeout: float = 120) -> StreamResult:
    result = stream.wait(timeout)
    stream.close()
    assert result.final or result.error, "no final response"
    return result


def generate(node: TritonServer, lora_name: str | None = None) -> StreamResult:
    sampling = GREEDY if lora_name is None else {**GREEDY, "lora_name": lora_name}
    return finish(start(node, sampling))


def text(node: TritonServer, lora_name: str | None = None) -> str:
    result = generate(node, lora_name)
    assert result.error is None, result.error
    return result.text


def control(node: TritonServer, action: str, key: str | None = KEY,
            **parameters: str) -> StreamResult:
    sent: dict[str, Any] = {"adapter_control": action, **parameters}
    if key is not None:
        sent["repository_key"] = key
    stream = GrpcStream(node.grpc_url, MODEL)
    # As the control plane sends it: the stock tensors, text_input empty.
    stream.submit("", None, parameters=sent)  # type: ignore[arg-type]
    return finish(stream)


def state(node: TritonServer, action: str = "list", **parameters: str) -> dict[str, Any]:
    result = control(node, action, **parameters)
    assert result.error is None, result.error
    assert len(result.texts) == 1, "one response"
    return json.loads(result.text)


def refusal(node: TritonServer, action: str, **parameters: str) -> str:
    result = control(node, action, **parameters)
    assert result.error is not None, result.text
    return result.error


def names(answer: dict[str, Any]) -> list[str]:
    return [adapter["name"] for adapter in answer["adapters"]]


def test_control_needs_the_nodes_repository_key(node):
    assert "repository_key: refused" in refusal(node, "list", key=None)
    assert "repository_key: refused" in refusal(node, "list", key=KEY + "-wrong")
    assert state(node) == {"adapters": [], "max_loras": 2, "max_lora_rank": 16, "max_adapters": 2}


def test_bad_adapters_are_refused_and_the_engine_keeps_serving(node, adapters, tmp_path):
    base = text(node)
    message = refusal(node, "load", adapter_name="big", adapter_path=str(adapters["big"]))
    assert "LoRA rank 32 is greater than max_lora_rank 16" in message
    assert f"adapter_path: {adapters['big']}" in message
    missing = tmp_path / "nowhere"
    assert f"{missing} is not a directory on the node" in refusal(
        node, "load", adapter_name="x", adapter_path=str(missing))
    assert text(node) == base
    assert names(state(node)) == []


def test_loading_while_streams_run_interrupts_none(node, adapters):
    streams = [start(node, LONG, prompt=f"Story number {i}:") for i in range(3)]
    try:
        assert wait_until(lambda: all(s.result.texts for s in streams), 60), "streams started"
        loaded = state(node, "load", adapter_name="a", adapter_path=str(adapters["a"]))
        running = [s.result.final for s in streams]
    finally:
        results = [finish(s) for s in streams]
    assert loaded["adapters"] == [{"name": "a", "path": str(adapters["a"]), "rank": 8,
                                   "requests_in_flight": 0}]
    assert not all(running), "the load was answered while streams ran"
    assert [(r.error, r.num_output_tokens) for r in results] == [(None, LONG["max_tokens"])] * 3


def test_an_adapter_changes_greedy_output_and_a_repeated_load_is_a_no_op(node, adapters):
    assert text(node, "a") != text(node)
    assert names(state(node, "load", adapter_name="a", adapter_path=str(adapters["a"]))) == ["a"]
    assert "'a' is loaded from" in refusal(node, "load", adapter_name="a",
                                           adapter_path=str(adapters["b"]))


def test_two_adapters_serve_side_by_side(node, adapters):
    both = state(node, "load", adapter_name="b", adapter_path=str(adapters["b"]))
    assert names(both) == ["a", "b"]
    alone = {name: text(node, name) for name in (None, "a", "b")}
    streams = {name: start(node, GREEDY if name is None else {**GREEDY, "lora_name": name})
               for name in (None, "a", "b")}
    together = {name: finish(stream) for name, stream in streams.items()}
    assert all(result.error is None for result in together.values())
    assert len(set(alone.values())) == 3, alone
    # Batched together, the base request gets no adapter (vLLM's CPU ops gave it the last
    # adapter slot's for the steps it shared: llm_backend/cpu_lora_ops.py), and each other keeps
    # its own: its text is closest to its own answer alone (an adapter's noise has near-ties that
    # batch arithmetic on a CPU may flip).
    assert together[None].text == alone[None]
    for name, result in together.items():
        shared = {other: len(os.path.commonprefix([result.text, value]))
                  for other, value in alone.items()}
        assert shared[name] == max(shared.values()), (name, result.text, alone)
    assert "holds 2 adapters (a, b), its limit" in refusal(
        node, "load", adapter_name="c", adapter_path=str(adapters["a"]))


def test_an_unknown_lora_name_is_refused_listing_the_loaded_ones(node):
    error = generate(node, "sql").error
    assert error is not None
    assert "sampling_parameters.lora_name: adapter 'sql' is not loaded; loaded: a, b" in error


def test_unload_waits_for_the_adapters_requests_then_refuses_it(node):
    stream = start(node, {**LONGER, "lora_name": "a"})
    assert wait_until(lambda: bool(stream.result.texts), 60)
    in_flight = {a["name"]: a["requests_in_flight"] for a in state(node)["adapters"]}
    assert in_flight == {"a": 1, "b": 0}
    unloading = threading.Thread(target=lambda: answers.append(state(node, "unload",
                                                                     adapter_name="a")))
    answers: list[dict[str, Any]] = []
    unloading.start()
    # New requests for it are refused at once, while the running one continues.
    assert wait_until(lambda: "'a' is being unloaded" in (generate(node, "a").error or ""), 10)
    result = finish(stream)
    unloading.join(30)
    assert (result.error, result.num_output_tokens) == (None, LONGER["max_tokens"])
    assert names(answers[0]) == ["b"]
    assert "'a' is not loaded; loaded: b" in (generate(node, "a").error or "")
    started = time.monotonic()
    assert names(state(node, "unload", adapter_name="a")) == ["b"], "unloading twice: a no-op"
    assert time.monotonic() - started < 5
    assert names(state(node)) == ["b"]
