"""What one run of llmctl carries from its global options to the command: how to speak, and the
API client, made on first use so that commands without a server (``schema``) need no config."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import quote

import typer

from control_plane.llmctl import config
from control_plane.llmctl.client import ApiClient
from control_plane.llmctl.output import Output


@dataclass
class Invocation:
    out: Output
    url_option: str | None = None
    token_option: str | None = None
    _client: ApiClient | None = field(default=None, repr=False)

    @property
    def client(self) -> ApiClient:
        if self._client is None:
            self._client = ApiClient(config.resolve(self.url_option, self.token_option))
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def invocation(ctx: typer.Context) -> Invocation:
    found = ctx.find_object(Invocation)
    if found is None:
        raise RuntimeError("llmctl commands run through control_plane.llmctl.app:main")
    return found


def segment(value: str | int) -> str:
    """A name for a URL path, quoted so that '/', '?' or '#' in it cannot reach another route."""
    return quote(str(value), safe="")
