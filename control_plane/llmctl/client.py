"""The admin REST API as llmctl sees it: one httpx client, and every HTTP outcome mapped to an
exit code (see ``exit_codes``) with the server's own message."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import httpx

from control_plane.llmctl.config import TOKEN_VARIABLE, URL_VARIABLE, ClientConfig
from control_plane.llmctl.errors import LlmctlError
from control_plane.llmctl.exit_codes import ExitCode

API_PREFIX = "/api/v1"
# Each request, not the command: waiting commands poll with many short requests.
REQUEST_TIMEOUT_S = 30.0
# A 409 from POST .../promotions points at the promotion that is running.
_PROMOTION_LOCATION = re.compile(r"/api/v1/promotions/([0-9A-Za-z_-]+)$")
_OPERATION_LOCATION = re.compile(r"/api/v1/operations/([0-9a-f]+)$")


@dataclass(frozen=True)
class ApiResponse:
    status_code: int
    body: Any
    headers: httpx.Headers


def _user_agent() -> str:
    try:
        version = metadata.version("triton-llm-platform")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return f"llmctl/{version}"


class ApiClient:
    def __init__(self, config: ClientConfig, timeout: float = REQUEST_TIMEOUT_S) -> None:
        self.config = config
        headers = {"User-Agent": _user_agent(), "Accept": "application/json"}
        if config.token:
            headers["Authorization"] = f"Bearer {config.token}"
        self._http = httpx.Client(base_url=config.url + API_PREFIX, headers=headers,
                                  timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, *, json_body: Any = None,
                params: dict[str, Any] | None = None,
                headers: dict[str, str] | None = None) -> ApiResponse:
        """Send one request; a 2xx answer comes back, anything else is raised as LlmctlError."""
        if not self.config.token:
            raise LlmctlError(ExitCode.NOT_ALLOWED, "NoToken",
                              f"no API token: pass --token, set {TOKEN_VARIABLE}, or put "
                              "token = \"...\" in the config file (see 'llmctl --help')")
        given = {key: value for key, value in (params or {}).items() if value is not None}
        try:
            response = self._http.request(method, path, json=json_body, params=given,
                                          headers=headers)
        except httpx.TransportError as exc:
            raise LlmctlError(
                ExitCode.UNREACHABLE, "Unreachable",
                f"cannot reach the control plane at {self.config.url} ({type(exc).__name__}: "
                f"{exc or 'no detail'}); check --url or {URL_VARIABLE} and that the server "
                "runs") from None
        if response.status_code >= 300:
            raise self._error_of(response)
        return ApiResponse(response.status_code, self._body_of(response), response.headers)

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params).body

    def post(self, path: str, json_body: Any = None, params: dict[str, Any] | None = None
             ) -> Any:
        return self.request("POST", path, json_body=json_body, params=params).body

    def put(self, path: str, json_body: Any = None) -> Any:
        return self.request("PUT", path, json_body=json_body).body

    def patch(self, path: str, json_body: Any) -> Any:
        return self.request("PATCH", path, json_body=json_body).body

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path).body

    def _body_of(self, response: httpx.Response) -> Any:
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise LlmctlError(
                ExitCode.UNREACHABLE, "NotTheControlPlane",
                f"{response.request.method} {response.request.url} answered "
                f"{response.status_code} with a body that is not JSON; is {self.config.url} "
                "the control plane?") from None

    def _error_of(self, response: httpx.Response) -> LlmctlError:
        status = response.status_code
        error, detail = _error_fields(response)
        where = f"{response.request.method} {response.request.url.path}"
        context: dict[str, Any] = {"status": status}
        if status in (401, 403):
            if status == 401 and self.config.token_source:
                detail += f" (the token came from {self.config.token_source})"
            return LlmctlError(ExitCode.NOT_ALLOWED, error, detail, context)
        if status == 409:
            location = response.headers.get("Location", "")
            if found := _PROMOTION_LOCATION.search(location):
                context["promotion_id"] = found.group(1)
                if found.group(1) not in detail:
                    detail += f" (the running promotion: {found.group(1)})"
            elif found := _OPERATION_LOCATION.search(location):
                context["operation_id"] = found.group(1)
            return LlmctlError(ExitCode.CONFLICT, error, detail, context)
        if status >= 500:
            return LlmctlError(ExitCode.UNREACHABLE, error,
                               f"{where} failed on the server ({status}): {detail}", context)
        return LlmctlError(ExitCode.USAGE, error, detail, context)


def _error_fields(response: httpx.Response) -> tuple[str, str]:
    """The server's ``{"error", "detail"}``; for a body of another shape (a proxy's HTML page),
    the status line and the start of the text."""
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        return str(body.get("error") or f"HTTP{response.status_code}"), body["detail"]
    text = " ".join(response.text.split())[:200]
    return (f"HTTP{response.status_code}",
            f"HTTP {response.status_code} {response.reason_phrase}" + (f": {text}" if text else ""))
