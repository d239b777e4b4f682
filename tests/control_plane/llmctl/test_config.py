"""Where llmctl finds its server and token: --url/--token, then LLMCP_URL/LLMCP_TOKEN, then the
config file ($LLMCTL_CONFIG or ~/.config/llmctl/config.toml), then the default URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.llmctl import config
from control_plane.llmctl.errors import LlmctlError
from tests.control_plane.llmctl.conftest import Llmctl, secret_of

NOWHERE = "http://127.0.0.1:9"


def _config_file(path: Path, url: str, token: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'url = "{url}"\ntoken = "{token}"\n', encoding="utf-8")
    return path


@pytest.mark.parametrize("options, environ, file, expected", [
    ((None, None), {}, None, (config.DEFAULT_URL, None)),
    ((None, None), {}, ("http://file:1", "t-file"), ("http://file:1", "t-file")),
    ((None, None), {"LLMCP_URL": "http://env:2", "LLMCP_TOKEN": "t-env"},
     ("http://file:1", "t-file"), ("http://env:2", "t-env")),
    ((None, None), {"LLMCP_TOKEN": "t-env"}, ("http://file:1", "t-file"),
     ("http://file:1", "t-env")),
    (("http://opt:3/", "t-opt"), {"LLMCP_URL": "http://env:2", "LLMCP_TOKEN": "t-env"},
     ("http://file:1", "t-file"), ("http://opt:3", "t-opt")),
], ids=["default", "file", "environment-over-file", "each-value-on-its-own",
        "options-over-all"])
def test_precedence(tmp_path: Path, options: tuple[str | None, str | None],
                    environ: dict[str, str], file: tuple[str, str] | None,
                    expected: tuple[str, str | None]) -> None:
    environ = {"HOME": str(tmp_path), **environ}
    if file is not None:
        _config_file(config.default_config_path(environ), *file)
    resolved = config.resolve(*options, environ=environ)
    assert (resolved.url, resolved.token) == expected


@pytest.mark.parametrize("content, message", [
    ('url = "http://x:1"\ntokne = "t"\n', "unknown keys tokne"),
    ("url = [1]\n", "'url' must be a string"),
    ("url = \n", "cannot read the config file"),
    ('url = "ftp://x"\n', "is not an http:// or https:// URL"),
], ids=["misspelt-key", "not-a-string", "not-toml", "not-http"])
def test_a_bad_config_file_is_a_usage_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "llmctl.toml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(LlmctlError) as raised:
        config.resolve(None, None, environ={"HOME": str(tmp_path), "LLMCTL_CONFIG": str(path)})
    assert raised.value.exit_code == 2 and message in raised.value.detail


def test_a_missing_explicit_config_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(LlmctlError, match="which is not a file"):
        config.resolve(None, None, environ={"LLMCTL_CONFIG": str(tmp_path / "none.toml")})


def test_the_config_file_and_overriding_options(run_llmctl: Llmctl, live_url: str,
                                                admin: dict[str, str], tmp_path: Path) -> None:
    from_file = _config_file(tmp_path / "llmctl.toml", live_url, secret_of(admin))
    created = run_llmctl("models", "create", "chat", "--json",
                         env={"LLMCTL_CONFIG": str(from_file)})
    assert created.code == 0, created

    wrong = {"LLMCP_URL": NOWHERE, "LLMCP_TOKEN": "llmcp_wrong"}
    assert run_llmctl("models", "show", "chat", env=wrong).code == 5
    # The options win over the environment, wherever they stand on the line.
    for args in (["--url", live_url, "--token", secret_of(admin), "models", "show", "chat"],
                 ["models", "show", "chat", f"--url={live_url}", "--token", secret_of(admin)]):
        shown = run_llmctl(*args, "--json", env=wrong)
        assert shown.code == 0, shown
        assert shown.document()["name"] == "chat"
