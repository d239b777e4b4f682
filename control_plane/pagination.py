"""The page envelope every list endpoint returns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Generic, TypeVar

from fastapi import Query
from pydantic import BaseModel
from pydantic_core import to_json

T = TypeVar("T")
# Bounded so a huge offset is a 422, not an integer the database driver cannot bind.
MAX_OFFSET = 2**31 - 1
Limit = Annotated[int, Query(ge=1, le=500)]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    limit: int
    offset: int


def page_json(items: Sequence[Any], total: int, limit: int, offset: int) -> bytes:
    """The page envelope around ``items`` (already in their JSON shape), serialized once.

    Returned as a Page, it would be validated against the response model and dumped by FastAPI,
    after the route built and validated it: three passes over every item instead of one. Routes
    keep ``response_model=Page[...]``, so the OpenAPI schema still says what they answer."""
    body = {"items": items, "total": total, "limit": limit, "offset": offset}
    # inf_nan_mode: as a model dumps NaN and infinities by default (null), not as JavaScript does.
    return to_json(body, inf_nan_mode="null")
