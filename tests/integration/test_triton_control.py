"""The gRPC Triton driver against real tritonserver processes: loads by config and files into an
empty repository, Triton's own errors, a locked repository API, and a node that goes away."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from packaging.version import Version
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from control_plane.triton import restricted_api
from control_plane.triton.grpc_control import TritonGrpcControl
from control_plane.triton.llm_client import GrpcStream
from control_plane.triton.model_config import (
    model_json_bytes,
    read_model_json,
    read_pbtxt,
    to_load_json,
)
from control_plane.triton.protocol import (
    IndexEntry,
    LoadRejected,
    ModelNotLoaded,
    ModelState,
    NodeUnreachable,
    RepositoryAccessDenied,
    TritonControl,
)
from control_plane.triton.runtime import CACHE_DIR
from control_plane.triton.server import TritonServer
from tests.integration.support import MODEL_DIR, wait_until

KEY = secrets.token_urlsafe(24)

# A Python-backend model that adds OFFSET to its input: it loads in a fraction of a second, and
# its answer shows which files Triton runs.
ADDER_SOURCE = """
import triton_python_backend_utils as pb_utils

OFFSET = {offset}
SLEEP_IN_INITIALIZE = {sleep}


class TritonPythonModel:
    def initialize(self, args):
        import time
        time.sleep(SLEEP_IN_INITIALIZE)

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUTPUT0", pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy() + OFFSET
            )])
            for request in requests
        ]
"""
FAILING_SOURCE = b"""
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("the weights are missing from /nowhere")

    def execute(self, requests):
        return []
"""


def adder_files(offset: float = 0.0, sleep: float = 0.0) -> dict[str, bytes]:
    return {"file:1/model.py": ADDER_SOURCE.format(offset=offset, sleep=sleep).encode()}


def adder_config(name: str, generation: str = "1",
                 input_type: int = model_config_pb2.TYPE_FP32) -> str:
    config = model_config_pb2.ModelConfig(name=name, backend="python", max_batch_size=0)
    config.input.add(name="INPUT0", data_type=input_type, dims=[-1])
    config.output.add(name="OUTPUT0", data_type=model_config_pb2.TYPE_FP32, dims=[-1])
    # Any change of config makes Triton reload; this is the knob the tests turn.
    config.parameters["generation"].string_value = generation
    return to_load_json(config)


def infer_grpc(server: TritonServer, name: str, values: list[float]) -> list[float]:
    tensor = grpcclient.InferInput("INPUT0", [len(values)], "FP32")
    tensor.set_data_from_numpy(np.array(values, dtype=np.float32))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        return client.infer(name, [tensor]).as_numpy("OUTPUT0").tolist()


def infer_http(server: TritonServer, name: str, values: list[float]) -> list[float]:
    tensor = httpclient.InferInput("INPUT0", [len(values)], "FP32")
    tensor.set_data_from_numpy(np.array(values, dtype=np.float32))
    with httpclient.InferenceServerClient(server.http_url) as client:
        return client.infer(name, [tensor]).as_numpy("OUTPUT0").tolist()


def entries_named(control: TritonControl, name: str) -> list[IndexEntry]:
    return [entry for entry in control.index() if entry.name == name]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """A node of its own with an empty repository (everything arrives through the API) and a
    locked repository API. Its ports are free ones the kernel picks, unlike any other server's."""
    server = TritonServer(tmp_path_factory.mktemp("empty-repository"), repository_key=KEY,
                          log_path=CACHE_DIR / "logs" / "test-control-tritonserver.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def control(node: TritonServer) -> Iterator[TritonGrpcControl]:
    with TritonGrpcControl(node.grpc_url, node.metrics_url, repository_key=KEY) as driver:
        yield driver


def test_load_makes_a_model_ready_listed_and_described_and_unload_takes_it_away(control, node):
    assert not entries_named(control, "adder")
    control.load("adder", adder_config("adder"), adder_files(offset=1))

    assert control.is_model_ready("adder")
    assert entries_named(control, "adder") == [IndexEntry("adder", 1, ModelState.READY)]
    metadata = control.metadata("adder")
    assert metadata["name"] == "adder" and metadata["versions"] == ["1"]
    assert metadata["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1]}]
    assert infer_grpc(node, "adder", [1, 2]) == [2, 3]

    control.unload("adder")
    assert not control.is_model_ready("adder")
    assert not entries_named(control, "adder"), "a model loaded from files leaves the index"
    with pytest.raises(ModelNotLoaded, match="adder"):
        control.metadata("adder")


def test_server_version_is_the_triton_release(control):
    # The bundled r24.10 is Triton 2.51.0; the control plane compares it with a minimum.
    assert Version(control.server_version()) >= Version("2.51.0")


def test_metrics_count_inferences_per_model(control, node):
    control.load("metered", adder_config("metered"), adder_files())
    try:
        infer_grpc(node, "metered", [0])
        infer_grpc(node, "metered", [0])
        counted = r'^nv_inference_count\{model="metered",version="1"\} 2$'
        # Triton updates its counters just after a response is sent, so a loaded machine can
        # read them a moment before the second inference is counted.
        texts: list[str] = []

        def counted_twice() -> bool:
            texts.append(control.metrics())
            return re.search(counted, texts[-1], re.MULTILINE) is not None

        assert wait_until(counted_twice, timeout=10), texts[-1]
    finally:
        control.unload("metered")


def test_exception_in_initialize_is_load_rejected_with_the_backends_own_message(control):
    with pytest.raises(LoadRejected) as rejected:
        control.load("broken", adder_config("broken"), {"file:1/model.py": FAILING_SOURCE})
    assert rejected.value.model == "broken"
    assert "RuntimeError: the weights are missing from /nowhere" in rejected.value.reason
    assert not control.is_model_ready("broken")
    # Triton keeps the failed state and its reason only for models with a repository directory.
    assert not entries_named(control, "broken")


@pytest.mark.parametrize("config", [
    adder_config("untyped", input_type=model_config_pb2.TYPE_INVALID),
    adder_config("another-name"),
    '{"backend": "python", "no_such_field": 1}',
], ids=["input-without-data-type", "name-differs-from-load-name", "unknown-field"])
def test_config_triton_rejects_is_load_rejected_with_a_pointer_to_the_nodes_log(control, config):
    with pytest.raises(LoadRejected, match="failed to poll from model repository") as rejected:
        control.load("untyped", config, adder_files())
    assert "node's log names the cause" in str(rejected.value)
    assert not control.is_model_ready("untyped")


def test_failed_reload_leaves_the_loaded_model_serving(control, node):
    control.load("steady", adder_config("steady", generation="1"), adder_files(offset=1))
    try:
        with pytest.raises(LoadRejected, match="weights are missing"):
            control.load("steady", adder_config("steady", generation="2"),
                         {"file:1/model.py": FAILING_SOURCE})
        assert control.is_model_ready("steady")
        assert infer_grpc(node, "steady", [1]) == [2]
    finally:
        control.unload("steady")


def test_new_files_count_only_when_the_config_changes(control, node):
    control.load("revised", adder_config("revised", generation="1"), adder_files(offset=1))
    try:
        control.load("revised", adder_config("revised", generation="1"), adder_files(offset=2))
        assert infer_grpc(node, "revised", [0]) == [1], "Triton keeps the running files"
        control.load("revised", adder_config("revised", generation="2"), adder_files(offset=2))
        assert infer_grpc(node, "revised", [0]) == [2]
    finally:
        control.unload("revised")


def test_repository_api_is_locked_to_the_key_while_inference_stays_open(control, node):
    control.load("public", adder_config("public"), adder_files(offset=1))
    try:
        with grpcclient.InferenceServerClient(node.grpc_url) as grpc_client:
            for attempt in (lambda: grpc_client.load_model("public"),
                            lambda: grpc_client.unload_model("public"),
                            lambda: grpc_client.load_model("intruder", config=adder_config(
                                "intruder"), files=adder_files())):
                with pytest.raises(InferenceServerException, match="restricted"):
                    attempt()
        with httpclient.InferenceServerClient(node.http_url) as http_client:
            for attempt in (lambda: http_client.load_model("public"),
                            lambda: http_client.unload_model("public")):
                with pytest.raises(InferenceServerException, match="restricted") as refused:
                    attempt()
                assert refused.value.status() == "403"
            # The HTTP side takes the same key under the header's plain name; the repository
            # directory itself is empty.
            index = http_client.get_model_repository_index(headers=restricted_api.http_headers(KEY))
            assert index == []

        assert control.is_model_ready("public") and not control.is_model_ready("intruder")
        assert infer_grpc(node, "public", [1]) == [2]
        assert infer_http(node, "public", [1]) == [2]

        with TritonGrpcControl(node.grpc_url, node.metrics_url,
                               repository_key="not-" + KEY) as wrong_key:
            for attempt in (wrong_key.index, lambda: wrong_key.unload("public"),
                            lambda: wrong_key.load("public", adder_config("public"), {})):
                with pytest.raises(RepositoryAccessDenied, match="same key"):
                    attempt()
            assert wrong_key.is_model_ready("public"), "readiness is not locked"
    finally:
        control.unload("public")


def test_load_slower_than_its_timeout_is_unreachable_and_still_finishes_on_the_node(control, node):
    with TritonGrpcControl(node.grpc_url, node.metrics_url, repository_key=KEY,
                           load_timeout_s=0.5) as impatient:
        started = time.monotonic()
        with pytest.raises(NodeUnreachable, match="may still finish"):
            impatient.load("slow", adder_config("slow"), adder_files(sleep=4))
        # Gave up at its 0.5 s timeout, not when the 4 s load ended (loose for a loaded host).
        assert time.monotonic() - started < 3
    try:
        assert wait_until(lambda: control.is_model_ready("slow"), 15)
    finally:
        control.unload("slow")


@pytest.fixture
def short_lived(tmp_path) -> Iterator[TritonServer]:
    server = TritonServer(tmp_path, log_path=CACHE_DIR / "logs" / "test-control-short-lived.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_index_keeps_state_and_reason_for_models_in_the_nodes_repository(short_lived):
    (short_lived.model_repository / "on-disk").mkdir()
    with TritonGrpcControl(short_lived.grpc_url, short_lived.metrics_url) as driver:
        assert driver.index() == [IndexEntry("on-disk", None, ModelState.UNAVAILABLE)]
        with pytest.raises(LoadRejected):
            driver.load("on-disk", adder_config("on-disk"), {"file:1/model.py": FAILING_SOURCE})
        [failed] = driver.index()
        assert (failed.version, failed.state) == (1, ModelState.UNAVAILABLE)
        assert "RuntimeError: the weights are missing from /nowhere" in failed.reason

        driver.load("on-disk", adder_config("on-disk"), adder_files())
        assert driver.index() == [IndexEntry("on-disk", 1, ModelState.READY)]
        driver.unload("on-disk")
        [unloaded] = driver.index()
        assert unloaded.state in {ModelState.UNLOADING, ModelState.UNAVAILABLE}


def test_file_keys_without_the_file_prefix_are_refused_before_triton_sees_them(control):
    with pytest.raises(ValueError, match="file:<version>/<path>"):
        control.load("adder", adder_config("adder"), {"1/model.py": b""})


def test_stopped_node_is_unreachable_at_once_and_reachable_again_after_restart(short_lived):
    with TritonGrpcControl(short_lived.grpc_url, short_lived.metrics_url,
                           call_timeout_s=5) as driver:
        assert driver.is_server_live() and driver.index() == []
        short_lived.stop()

        assert not driver.is_server_live()
        for call in (driver.index, lambda: driver.load("adder", adder_config("adder"), {}),
                     lambda: driver.unload("adder"), lambda: driver.is_model_ready("adder"),
                     lambda: driver.metadata("adder"), driver.metrics,
                     driver.server_version):
            started = time.monotonic()
            with pytest.raises(NodeUnreachable, match="127.0.0.1"):
                call()
            # Well under the 5 s call timeout: not retried until it runs out.
            assert time.monotonic() - started < 2.5, "a refused connection fails at once"

        short_lived.start()
        started = time.monotonic()
        assert wait_until(driver.is_server_live, 5)
        assert time.monotonic() - started < 3, "the driver reconnects without a long backoff"
        driver.load("adder", adder_config("adder"), adder_files(offset=1))
        assert driver.index() == [IndexEntry("adder", 1, ModelState.READY)]


def test_vllm_model_loads_from_config_and_files_alone(control, node):
    """The point of loading by API: our backend needs nothing in the node's repository."""
    name = "smollm2-by-api"
    config = read_pbtxt(MODEL_DIR / "config.pbtxt")
    config.name = name
    engine_args = {**read_model_json(MODEL_DIR), "max_num_seqs": 2}
    control.load(name, to_load_json(config), {"file:1/model.json": model_json_bytes(engine_args)})
    try:
        assert control.is_model_ready(name)
        stream = GrpcStream(node.grpc_url, name)
        try:
            stream.submit("The capital of France is", {"max_tokens": 4, "temperature": 0})
            result = stream.wait(timeout=60)
        finally:
            stream.close()
        assert result.error is None and result.final and result.text.strip(), result
    finally:
        control.unload(name)
    assert not control.is_model_ready(name)
