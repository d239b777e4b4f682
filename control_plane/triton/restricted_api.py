"""Triton's restricted model-repository API: the key that keeps load, unload and index to the
control plane.

tritonserver checks one header on restricted endpoints. It takes the header's name once per
protocol but reads it differently: over HTTP the header is the name as given; over gRPC it is the
name behind a fixed ``triton-grpc-protocol-`` prefix (and must be lower case, as HTTP/2 wants).
The launcher and the driver both build their side from this module so they cannot drift apart.
Everything else (health, metadata, inference, statistics, metrics) stays open.
"""

from __future__ import annotations

import re

HEADER = "triton-repository-key"
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"
RESTRICTED_API = "model-repository"
# Triton splits the flag value at ':' and '=', and gRPC metadata must be printable ASCII;
# a URL-safe alphabet (what ``secrets.token_urlsafe`` yields) passes through both unchanged.
_KEY_PATTERN = re.compile(r"[A-Za-z0-9_\-]{8,}")


def check_key(key: str) -> str:
    """Return ``key`` if tritonserver's flag parser and gRPC metadata can carry it unchanged."""
    if not _KEY_PATTERN.fullmatch(key):
        raise ValueError(
            "a repository key must be at least 8 characters from A-Z, a-z, 0-9, '_' and '-' "
            "(make one with: python -c 'import secrets; print(secrets.token_urlsafe(24))')"
        )
    return key


def server_flags(key: str) -> list[str]:
    """The tritonserver flags that restrict the model-repository API to holders of ``key``."""
    setting = f"{RESTRICTED_API}:{HEADER}={check_key(key)}"
    return [f"--http-restricted-api={setting}", f"--grpc-restricted-protocol={setting}"]


def http_headers(key: str) -> dict[str, str]:
    return {HEADER: key}


def grpc_headers(key: str) -> dict[str, str]:
    return {GRPC_HEADER_PREFIX + HEADER: key}
