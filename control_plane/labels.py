"""Request parameters shared by every resource router: the label filter and If-Match."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header, Query

from control_plane.errors import InvalidRequest

LabelFilter = Annotated[list[str], Query(
    alias="label", description="key=value; repeat to require several labels")]
IfMatch = Annotated[str | None, Header(
    description="the ETag last read; a stale one gets 412 instead of overwriting a newer change")]


def parse_label_filter(pairs: list[str]) -> dict[str, str]:
    """``["team=nlp", "env=prod"]`` as a dict; refuses entries without ``=``."""
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidRequest(f"label filter '{pair}' must look like key=value")
        labels[key] = value
    return labels
