"""Errors a client can cause or meet, independent of Triton.

    BackendError
     ├── InvalidRequest     the request is wrong; names the field (Triton INVALID_ARGUMENT)
     └── Unavailable        the engine cannot serve now: dead, unloading (Triton UNAVAILABLE)
          └── QueueRejected  a waiting request's queue is full or it waited too long (scheduler.py)

``model.py`` maps each to a ``pb_utils.TritonError`` code, so clients see one status per cause.
"""

from __future__ import annotations


class BackendError(Exception):
    """Base of every error the backend reports to a client."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(BackendError):
    """The request cannot be served as sent; ``field`` names what was wrong."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field


class Unavailable(BackendError):
    """The model cannot serve right now (engine dead, model unloading)."""
