"""Request parameters shared by every resource router: the label filter, If-Match and free text."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header, Query

from control_plane.labels import NO_NUL_PATTERN

TextFilter = Annotated[str | None, Query(pattern=NO_NUL_PATTERN)]
LabelFilter = Annotated[list[str], Query(
    alias="label", description="key=value; repeat to require several labels")]
IfMatch = Annotated[str | None, Header(
    description="the ETag last read; a stale one gets 412 instead of overwriting a newer change")]
