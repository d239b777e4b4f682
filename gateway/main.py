"""``llm-gateway``: the inference gateway process (HTTP for KServe v2 and OpenAI, gRPC for
KServe v2), configured from ``LLMGW_*`` variables (gateway/settings.py)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging

import grpc
import uvicorn
from tritonclient.grpc import service_pb2_grpc as pbg

from gateway.grpc_service import InferenceService
from gateway.http_app import create_app
from gateway.service import Gateway
from gateway.settings import GatewaySettings
from gateway.upstream_http import HttpUpstream

log = logging.getLogger("gateway")


async def serve(settings: GatewaySettings) -> None:
    gateway = Gateway(settings)
    upstream = HttpUpstream(gateway)
    background = [asyncio.create_task(gateway.watcher.run(), name="routing-watcher"),
                  asyncio.create_task(gateway.monitor.run(), name="node-monitor"),
                  asyncio.create_task(gateway.quotas.run(), name="limit-leases"),
                  asyncio.create_task(gateway.usage.run(), name="usage-reports")]
    grpc_server = None
    service = InferenceService(gateway)
    if settings.grpc_port:
        grpc_server = grpc.aio.server(options=[
            # A message over the limit is refused by gRPC itself with RESOURCE_EXHAUSTED.
            ("grpc.max_receive_message_length", settings.max_body_bytes),
            ("grpc.max_send_message_length", -1),
            ("grpc.keepalive_time_ms", 30_000),
        ])
        pbg.add_GRPCInferenceServiceServicer_to_server(service, grpc_server)
        address = f"{settings.host}:{settings.grpc_port}"
        if grpc_server.add_insecure_port(address) == 0:
            raise SystemExit(f"cannot listen on gRPC {address} (is the port taken? set "
                             "LLMGW_GRPC_PORT)")
        await grpc_server.start()
    config = uvicorn.Config(
        create_app(gateway, upstream), host=settings.host, port=settings.http_port,
        log_level="warning", access_log=False,
        # h11 bounds the request line and headers (httptools has no such limit in uvicorn).
        http="h11", h11_max_incomplete_event_size=settings.max_header_bytes,
        timeout_keep_alive=int(settings.keep_alive_seconds), timeout_graceful_shutdown=30)
    server = uvicorn.Server(config)
    log.info("gateway: HTTP %s:%s, gRPC %s, routing from %s, limits counted in %s",
             settings.host, settings.http_port, settings.grpc_port or "off",
             settings.control_plane_url, settings.redis_url or "this process")
    try:
        await server.serve()
    finally:
        if grpc_server is not None:
            await grpc_server.stop(grace=10)
        for task in background:
            task.cancel()
        for task in background:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await service.close()
        await upstream.aclose()
        # What was counted since the last report goes now, if the control plane takes it.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(gateway.usage.flush(), 5)
        await gateway.usage_client.aclose()
        await gateway.watcher.close()
        await gateway.prompt_tokens.aclose()
        await gateway.monitor.close()
        if gateway.redis is not None:
            await gateway.redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http-port", type=int, help="overrides LLMGW_HTTP_PORT")
    parser.add_argument("--grpc-port", type=int, help="overrides LLMGW_GRPC_PORT (0: off)")
    args = parser.parse_args()
    overrides = {key: value for key, value in
                 {"http_port": args.http_port, "grpc_port": args.grpc_port}.items()
                 if value is not None}
    settings = GatewaySettings(**overrides)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # One line per long poll and per probe would drown the gateway's own log.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
