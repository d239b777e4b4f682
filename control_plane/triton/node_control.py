"""Opening a ``TritonControl`` for a registered node, with its repository key read from where
the node's ``api_key_ref`` says."""

from __future__ import annotations

import os
from pathlib import Path

from control_plane.errors import NodeUnavailable
from control_plane.triton.grpc_control import TritonGrpcControl
from control_plane.triton.specs import NodeEndpoint


def repository_key(endpoint: NodeEndpoint) -> str | None:
    reference = endpoint.api_key_ref
    if reference is None:
        return None
    kind, _, where = reference.partition(":")
    if kind == "env":
        value = os.environ.get(where)
        if not value:
            raise NodeUnavailable(f"node '{endpoint.name}': its repository key is to come from "
                                  f"environment variable {where}, which is not set here")
        return value.strip()
    try:
        return Path(where).read_text().strip()
    except OSError as exc:
        raise NodeUnavailable(f"node '{endpoint.name}': cannot read its repository key from "
                              f"{where} ({exc.strerror})") from exc


def connect(endpoint: NodeEndpoint) -> TritonGrpcControl:
    return TritonGrpcControl(endpoint.grpc_url, repository_key=repository_key(endpoint))
