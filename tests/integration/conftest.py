"""One tritonserver and one model load for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tritonclient.http as httpclient

from control_plane.triton.runtime import CACHE_DIR, PROJECT_ROOT
from control_plane.triton.server import TritonServer
from llm_backend.gateway_trust import GATEWAY_SECRET_ENV
from tests.integration.support import GATEWAY_SECRET, MODEL, load_model


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def triton() -> Iterator[TritonServer]:
    server = TritonServer(PROJECT_ROOT / "model_repository",
                          log_path=CACHE_DIR / "logs" / "test-session-tritonserver.log")
    # The node's side of the gateway handshake: tritonserver's environment (copied from ours when
    # it starts) is the backend's. Set only while it starts, so nothing else in the session sees it.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(GATEWAY_SECRET_ENV, GATEWAY_SECRET)
        server.start()
    try:
        load_model(server)
        yield server
    finally:
        server.stop()


@pytest.fixture
def served(triton: TritonServer) -> TritonServer:
    """The session server with the model ready (reloaded if a test unloaded it)."""
    with httpclient.InferenceServerClient(triton.http_url) as client:
        if not client.is_model_ready(MODEL):
            load_model(triton)
    return triton
