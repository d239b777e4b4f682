"""The test nodes' start survives losing a port chosen free to another process."""

from __future__ import annotations

import socket
from pathlib import Path

from control_plane.triton.server import TritonPorts, TritonServer

from .support import start_on_free_ports


def test_a_node_whose_port_was_taken_starts_on_fresh_ones(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        node = TritonServer(tmp_path, ports=TritonPorts(grpc=port), log_path=tmp_path / "node.log")
        try:
            start_on_free_ports(node)
            assert node.is_live() and node.ports.grpc != port
            assert b"already in use" in (tmp_path / "node.log").read_bytes()
        finally:
            node.stop()
