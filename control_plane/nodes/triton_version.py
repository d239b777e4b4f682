"""The Triton version floor: a node older than LLMCP_MIN_TRITON_VERSION is flagged, not refused,
so development set-ups keep working while production sees the warning."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

SETTING = "LLMCP_MIN_TRITON_VERSION"


def version_warning(server_version: str | None, minimum: str) -> str | None:
    """Why ``server_version`` is below ``minimum``, or None (also while it is not known yet)."""
    if server_version is None:
        return None
    try:
        found = Version(server_version)
    except InvalidVersion:
        return (f"Triton reports version '{server_version}', which cannot be compared with the "
                f"minimum {minimum} ({SETTING}); check the node's Triton release by hand")
    if found >= Version(minimum):
        return None
    return (f"Triton {server_version} is older than the minimum {minimum} ({SETTING}): it "
            "predates the fixes of NVIDIA security bulletin 5828 (CVE-2026-24207 and others); "
            f"use it for development only, or upgrade the node to Triton {minimum} or later")


@dataclass(frozen=True)
class ObservedVersion:
    """A node's Triton version as last read, and the warning it earns."""

    server_version: str | None
    warning: str | None

    @classmethod
    def check(cls, server_version: str | None, minimum: str) -> ObservedVersion:
        return cls(server_version, version_warning(server_version, minimum))
