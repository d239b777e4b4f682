"""The one error llmctl commands raise: what went wrong, for a human and for a pipeline."""

from __future__ import annotations

from typing import Any

from control_plane.llmctl.exit_codes import ExitCode

# What --json prints on stdout when a command fails; ``llmctl schema error`` prints it.
ERROR_DOCUMENT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://llm-platform.invalid/schemas/llmctl-error.json",
    "title": "llmctl error",
    "type": "object",
    "required": ["error", "detail", "exit_code"],
    "properties": {
        "error": {"type": "string", "description": "the kind of error: the server's error type "
                                                   "(VersionNotFound, Forbidden, ...) or "
                                                   "llmctl's (UsageError, Unreachable, "
                                                   "TimedOut, PromotionFailed, ...)"},
        "detail": {"type": "string", "description": "what was wrong and what to do"},
        "exit_code": {"enum": [int(code) for code in ExitCode if code is not ExitCode.SUCCESS]},
        "status": {"type": "integer", "description": "the HTTP status, when the server answered"},
        "promotion_id": {"type": "string", "description": "the promotion concerned: the running "
                                                          "one (exit 6), the awaited one (3, 4)"},
        "operation_id": {"type": "string"},
        "promotion": {"type": ["object", "null"],
                      "description": "the promotion as last seen (exit 3, 4)"},
        "operation": {"type": ["object", "null"],
                      "description": "the operation as last seen (exit 3, 4)"},
        "problems": {"type": "array", "items": {"type": "string"},
                     "description": "each problem of an invalid manifest, naming its field"},
    },
}


class LlmctlError(Exception):
    """Ends the command with ``exit_code``; ``context`` (ids, the promotion as it ended) goes
    into the --json error document beside ``error`` and ``detail``."""

    def __init__(self, exit_code: ExitCode, error: str, detail: str,
                 context: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.exit_code = exit_code
        self.error = error
        self.detail = detail
        self.context = context or {}

    def document(self) -> dict[str, Any]:
        return {"error": self.error, "detail": self.detail, "exit_code": int(self.exit_code),
                **self.context}


def usage_error(detail: str) -> LlmctlError:
    return LlmctlError(ExitCode.USAGE, "UsageError", detail)
