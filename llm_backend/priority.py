"""Priority levels: Triton's numbering (1 = most urgent) carried through to vLLM's scheduler.

Level 1 is the most urgent, as in Triton's own numbering; vLLM's priority scheduler also serves the
lowest value first, so a level passes to vLLM unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llm_backend.errors import InvalidRequest


@dataclass(frozen=True)
class PriorityLevels:
    """The levels a model config declares (``queue_config.py``)."""

    count: int
    default: int

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"priority levels must be at least 1, got {self.count}")
        if not 1 <= self.default <= self.count:
            raise ValueError(f"default priority level {self.default} is not in 1..{self.count}")

    def resolve(self, raw: Any) -> int:
        """The level a request asked for, or the default when it named none."""
        if raw is None:
            return self.default
        if isinstance(raw, bool):
            raise InvalidRequest("priority", f"must be an integer level 1..{self.count}, got {raw}")
        if isinstance(raw, str):
            try:
                raw = int(raw.strip())
            except ValueError:
                raise InvalidRequest(
                    "priority", f"must be an integer level 1..{self.count}, got {raw!r}"
                ) from None
        if isinstance(raw, float):
            if not raw.is_integer():
                raise InvalidRequest(
                    "priority", f"must be an integer level 1..{self.count}, got {raw}"
                )
            raw = int(raw)
        if not isinstance(raw, int):
            raise InvalidRequest("priority", f"must be an integer level 1..{self.count}")
        if not 1 <= raw <= self.count:
            raise InvalidRequest(
                "priority",
                f"level {raw} is out of range: this model has levels 1..{self.count} "
                f"(1 is most urgent, {self.default} is the default)",
            )
        return raw

    def to_vllm(self, level: int) -> int:
        """vLLM's priority value for a Triton level (both serve the lowest value first)."""
        return level
