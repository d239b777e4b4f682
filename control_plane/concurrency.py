"""Optimistic concurrency: a resource's ETag and the If-Match precondition a writer may send."""

from __future__ import annotations

from control_plane.errors import PreconditionFailed


def etag(row_id: int, revision: int) -> str:
    # The row id is part of the tag, so a deleted and re-created resource never reuses an old one.
    return f'"{row_id}.{revision}"'


def check_if_match(current: str, if_match: str | None, what: str) -> None:
    """Refuse a write whose If-Match names none of ``current`` (``*`` or absent: any version)."""
    if if_match is None:
        return
    candidates = {tag.strip() for tag in if_match.split(",")}
    if "*" in candidates or current in candidates:
        return
    raise PreconditionFailed(f"{what} changed since you read it (its ETag is now {current}); "
                             "GET it again and retry with the new ETag in If-Match")
