"""``llm-node``: run this node's tritonserver, register the node with the control plane, and
take it out cleanly on SIGTERM.

Start: tritonserver comes up empty in explicit mode (the control plane loads models through its
repository API, locked with the key only the two share), then the node joins. The reconciler
sees a node that is up, and loads what should run there: after a restart, the same name brings
its deployments back.

Stop (SIGTERM, as Kubernetes and ``docker stop`` send it): the node leaves, so gateways route
nothing new to it; after ``LLM_NODE_DRAIN_SECONDS`` for them to notice, tritonserver gets
SIGTERM, and our backend drains the streams still open before the engines exit.

If tritonserver dies, the agent exits with an error for the container runtime to restart it.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from types import FrameType

from pydantic import ValidationError

from control_plane.triton.server import TritonPorts, TritonServer
from llm_backend.gateway_trust import GATEWAY_SECRET_ENV
from node_agent.registration import Registration, RegistrationRefused
from node_agent.settings import NodeSettings

log = logging.getLogger("llm_node")
EXIT_TRITON_DIED = 1
EXIT_BAD_SETTINGS = 2
EXIT_REFUSED = 3


def _settings() -> NodeSettings:
    try:
        settings = NodeSettings()  # type: ignore[call-arg]  # required fields come from the env
        settings.token_secret()
        settings.repository_key()
        settings.gateway_secret()
    except (ValidationError, ValueError) as exc:
        log.error("llm-node: bad settings: %s", exc)
        sys.exit(EXIT_BAD_SETTINGS)
    return settings


def run(settings: NodeSettings, stop: threading.Event) -> int:
    settings.model_repository.mkdir(parents=True, exist_ok=True)
    gateway_secret = settings.gateway_secret()
    server = TritonServer(
        settings.model_repository,
        ports=TritonPorts(http=settings.http_port, grpc=settings.grpc_port,
                          metrics=settings.metrics_port),
        repository_key=settings.repository_key(), bind_address="0.0.0.0", log_to_stdout=True,
        environment={} if gateway_secret is None else {GATEWAY_SECRET_ENV: gateway_secret})
    registration = Registration(settings)
    try:
        server.start(timeout=settings.start_timeout_seconds)
        log.info("llm-node: tritonserver is live on ports %d/%d/%d", settings.http_port,
                 settings.grpc_port, settings.metrics_port)
        try:
            node = registration.join()
        except RegistrationRefused as refused:
            log.error("llm-node: %s", refused)
            return EXIT_REFUSED
        log.info("llm-node: node '%s' joined the control plane at %s (%s)", settings.name,
                 settings.control_plane_url, node.get("http_url"))
        while not stop.wait(1.0):
            if server.process is not None and server.process.poll() is not None:
                log.error("llm-node: tritonserver exited with %s; exiting for a restart",
                          server.process.returncode)
                return EXIT_TRITON_DIED
        _leave(registration, settings)
        log.info("llm-node: stopping tritonserver (open streams drain first)")
        code = server.stop(timeout=settings.stop_timeout_seconds)
        log.info("llm-node: tritonserver exited with %s", code)
        return 0
    finally:
        registration.close()
        server.kill()


def _leave(registration: Registration, settings: NodeSettings) -> None:
    try:
        answer = registration.leave()
        log.info("llm-node: left the control plane: %s", answer.get("detail"))
    except Exception as exc:  # noqa: BLE001 - stopping goes on whatever the control plane says
        log.warning("llm-node: could not tell the control plane this node is leaving (%s); "
                    "it will see the node down", exc)
        return
    # Gateways long-poll the routing table: give them the moment to drop this node.
    time.sleep(settings.drain_seconds)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    settings = _settings()
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("llm-node: %s: leaving", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    sys.exit(run(settings, stop))


if __name__ == "__main__":
    main()
