"""The page envelope every list endpoint returns."""

from __future__ import annotations

from typing import Annotated, Generic, TypeVar

from fastapi import Query
from pydantic import BaseModel

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
