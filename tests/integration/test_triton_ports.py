"""tritonserver's start survives losing a port chosen free to another process, and never
changes a port its caller gave."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from control_plane.triton.server import TritonPorts, TritonServer


@contextmanager
def started_with_a_port_taken(node: TritonServer, port: int) -> Iterator[TritonServer]:
    """``node`` started while another process holds ``port`` (taken between free_port() choosing
    it and tritonserver's start), stopped afterwards."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        try:
            node.start()
            yield node
        finally:
            node.stop()


def test_a_server_whose_chosen_port_was_taken_starts_on_fresh_ones(tmp_path: Path) -> None:
    node = TritonServer(tmp_path, log_path=tmp_path / "node.log")
    port = node.ports.grpc
    with started_with_a_port_taken(node, port):
        assert node.is_live() and node.ports.grpc != port
        assert b"already in use" in (tmp_path / "node.log").read_bytes()


def test_a_default_log_is_named_after_the_port_the_server_ended_up_on(tmp_path: Path) -> None:
    # The default log's name carries the HTTP port; it was fixed at construction, so after a
    # start on fresh ports it named a port nobody served on.
    node = TritonServer(tmp_path)
    port = node.ports.http
    with started_with_a_port_taken(node, port):
        assert node.ports.http != port
        assert node.log_path.name == f"tritonserver-{node.ports.http}.log"
        assert f"Started HTTPService at 127.0.0.1:{node.ports.http}".encode() in \
            node.log_path.read_bytes()


def test_a_port_the_caller_gave_is_never_changed(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        node = TritonServer(tmp_path, ports=TritonPorts(grpc=port), log_path=tmp_path / "node.log")
        try:
            with pytest.raises(RuntimeError, match="exited with 1"):
                node.start()
            assert node.ports.grpc == port
        finally:
            node.stop()
