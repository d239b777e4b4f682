"""Where llmctl finds the control plane and its token: options, then environment, then a file.

Precedence, highest first: ``--url``/``--token``; ``LLMCP_URL``/``LLMCP_TOKEN``; the TOML file at
``$LLMCTL_CONFIG`` or ``~/.config/llmctl/config.toml`` (keys ``url`` and ``token``); the default
URL. Each value is taken on its own, so a token from the environment and a URL from the file mix.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from control_plane.llmctl.errors import usage_error

DEFAULT_URL = "http://127.0.0.1:8080"
URL_VARIABLE = "LLMCP_URL"
TOKEN_VARIABLE = "LLMCP_TOKEN"
CONFIG_VARIABLE = "LLMCTL_CONFIG"
CONFIG_KEYS = frozenset({"url", "token"})


@dataclass(frozen=True)
class ClientConfig:
    url: str
    token: str | None
    # Where the token came from, so "no token" and "bad token" errors can say what to change.
    token_source: str


def default_config_path(environ: Mapping[str, str]) -> Path:
    home = Path(environ["HOME"]) if "HOME" in environ else Path.home()
    return home / ".config" / "llmctl" / "config.toml"


def _read_config_file(environ: Mapping[str, str]) -> tuple[Path, dict[str, str]]:
    explicit = environ.get(CONFIG_VARIABLE)
    path = Path(explicit) if explicit else default_config_path(environ)
    if not path.is_file():
        if explicit:
            raise usage_error(f"{CONFIG_VARIABLE} names {path}, which is not a file; point it "
                              "at a TOML file with 'url' and 'token', or unset it")
        return path, {}
    try:
        content = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise usage_error(f"cannot read the config file {path}: {exc}; fix it or point "
                          f"{CONFIG_VARIABLE} at another one") from None
    # A misspelt key must not silently fall back to the default URL.
    unknown = sorted(set(content) - CONFIG_KEYS)
    if unknown:
        raise usage_error(f"the config file {path} has unknown keys {', '.join(unknown)}; "
                          "only 'url' and 'token' are read")
    for key, value in content.items():
        if not isinstance(value, str):
            raise usage_error(f"the config file {path}: '{key}' must be a string, e.g. "
                              f"{key} = \"...\"")
    return path, content


def _is_http_url(url: str) -> bool:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        return False
    return parsed.scheme in ("http", "https") and bool(parsed.host)


def resolve(url_option: str | None, token_option: str | None,
            environ: Mapping[str, str] | None = None) -> ClientConfig:
    """The URL and token to use, by the precedence in this module's docstring."""
    environ = os.environ if environ is None else environ
    path, from_file = _read_config_file(environ)
    url = url_option or environ.get(URL_VARIABLE) or from_file.get("url") or DEFAULT_URL
    if not _is_http_url(url):
        raise usage_error(f"the control plane URL '{url}' is not an http:// or https:// URL; "
                          f"pass e.g. --url {DEFAULT_URL}")
    if token_option:
        token, source = token_option, "--token"
    elif environ.get(TOKEN_VARIABLE):
        token, source = environ[TOKEN_VARIABLE], TOKEN_VARIABLE
    elif from_file.get("token"):
        token, source = from_file["token"], f"the config file {path}"
    else:
        token, source = None, ""
    return ClientConfig(url=url.rstrip("/"), token=token, token_source=source)
