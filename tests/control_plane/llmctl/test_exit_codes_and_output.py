"""Exit codes a pipeline branches on (2 usage, 5 unreachable or 5xx, 7 not allowed), and how
llmctl speaks: one JSON document with --json, plain lines in CI, Rich only on a terminal."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.control_plane.llmctl.conftest import (
    CONTROL_CHARACTERS,
    Llmctl,
    api,
    in_a_terminal,
    secret_of,
)


def test_a_bad_token_and_too_small_a_scope_exit_7(llmctl: Llmctl, reader: dict[str, str]
                                                  ) -> None:
    bad = llmctl("models", "list", "--json", token="llmcp_not-a-real-token")
    document = bad.error_document(7)
    assert (document["error"], document["status"]) == ("Unauthorized", 401)
    assert "the token came from LLMCP_TOKEN" in document["detail"]
    refused = llmctl("models", "create", "chat", token=secret_of(reader))
    assert refused.code == 7 and refused.stdout == ""
    assert "has scope 'read'; this call needs 'write'" in refused.stderr
    assert llmctl("models", "list", token=secret_of(reader)).code == 0


def test_no_token_at_all_exits_7_saying_where_to_put_one(run_llmctl: Llmctl) -> None:
    result = run_llmctl("models", "list", "--json", env={"LLMCP_URL": "http://127.0.0.1:9"})
    assert "set LLMCP_TOKEN" in result.error_document(7)["detail"]


def test_nothing_listening_exits_5(run_llmctl: Llmctl) -> None:
    env = {"LLMCP_URL": "http://127.0.0.1:9", "LLMCP_TOKEN": "llmcp_x"}
    document = run_llmctl("models", "list", "--json", env=env).error_document(5)
    assert "cannot reach the control plane at http://127.0.0.1:9" in document["detail"]
    human = run_llmctl("models", "show", "chat", env=env)
    assert human.code == 5 and human.stdout == "" and "check --url or LLMCP_URL" in human.stderr


class _Broken(BaseHTTPRequestHandler):
    """A control plane whose database is down, behind a proxy that sometimes answers for it."""

    def do_GET(self) -> None:
        if self.path.startswith("/api/v1/models?"):
            self._answer(503, "application/json", json.dumps(
                {"error": "DatabaseUnavailable", "detail": "the database is unavailable"}))
        elif self.path.startswith("/api/v1/models/"):
            self._answer(502, "text/html", "<html><body>Bad Gateway</body></html>")
        else:
            self._answer(200, "text/html", "<html>a login page</html>")

    def _answer(self, status: int, content_type: str, body: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def broken_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Broken)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_5xx_and_answers_that_are_not_json_exit_5(run_llmctl: Llmctl, broken_url: str) -> None:
    env = {"LLMCP_URL": broken_url, "LLMCP_TOKEN": "llmcp_x"}
    unavailable = run_llmctl("models", "list", "--json", env=env).error_document(5)
    assert unavailable["error"] == "DatabaseUnavailable" and unavailable["status"] == 503
    gateway = run_llmctl("models", "show", "chat", "--json", env=env).error_document(5)
    assert "502 Bad Gateway" in gateway["detail"]
    not_json = run_llmctl("operations", "show", "abc", "--json", env=env).error_document(5)
    assert not_json["error"] == "NotTheControlPlane"


@pytest.mark.parametrize("args, message", [
    (["modles", "list"], "No such command"),
    (["models", "create"], "Missing argument"),
    (["models", "list", "--limit", "0"], "--limit"),
    (["versions", "show", "chat", "one"], "valid integer"),
    (["models", "create", "chat", "--label", "team"], "is not KEY=VALUE"),
    (["deployments", "status", "chat", "--alias", "production"], "--alias needs --node"),
    (["operations", "wait", "abc", "--timeout", "0"], "--timeout"),
], ids=["unknown-command", "missing-argument", "out-of-range", "not-a-number", "bad-label",
        "alias-without-node", "zero-timeout"])
def test_usage_errors_exit_2_and_with_json_are_a_json_document(
        run_llmctl: Llmctl, args: list[str], message: str) -> None:
    env = {"LLMCP_URL": "http://127.0.0.1:9", "LLMCP_TOKEN": "llmcp_x"}
    human = run_llmctl(*args, env=env)
    assert human.code == 2 and human.stdout == "" and message in human.stderr
    document = run_llmctl(*args, "--json", env=env).error_document(2)
    assert document["error"] == "UsageError" and message in document["detail"]


def test_no_arguments_shows_the_help_and_exit_codes(run_llmctl: Llmctl) -> None:
    result = run_llmctl()
    assert result.code == 2 and "Exit codes:" in result.stderr
    helped = run_llmctl("--help")
    assert helped.code == 0
    assert all(f"  {code}  " in helped.stdout for code in (0, 2, 3, 4, 5, 6, 7))


def test_json_is_one_document_and_ci_output_has_no_control_characters(
        llmctl: Llmctl, live_url: str, admin: dict[str, str]) -> None:
    with api(live_url, admin) as http:
        assert http.post("/models", json={"name": "chat", "description": "a\x1b[31mred"}
                         ).status_code == 201
    commands = [["models", "list"], ["models", "show", "chat"], ["models", "show", "ghost"],
                ["versions", "list", "chat"], ["aliases", "list", "chat"],
                ["promote", "chat", "--to", "production"], ["tokens", "list"]]
    for command in commands:
        as_json = llmctl(*command, "--json")
        json.loads(as_json.stdout)
        assert "\x1b" not in as_json.stdout, command
        in_ci = llmctl(*command, env={"CI": "true"})
        assert in_ci.code == as_json.code, command
        assert not CONTROL_CHARACTERS.search(in_ci.stdout + in_ci.stderr), (command, in_ci)
    # A server value carrying an escape sequence is shown escaped, not sent to the terminal.
    assert "a\\x1b[31mred" in llmctl("models", "show", "chat", env={"CI": "true"}).stdout


def test_a_terminal_gets_rich_tables_unless_ci_is_set(live_url: str, admin: dict[str, str],
                                                      tmp_path: Path) -> None:
    with api(live_url, admin) as http:
        assert http.post("/models", json={"name": "chat"}).status_code == 201
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TERM": "xterm-256color",
           "LLMCP_URL": live_url, "LLMCP_TOKEN": secret_of(admin)}
    code, rich = in_a_terminal(["models", "list"], env)
    assert code == 0, rich
    assert "\x1b[" in rich and "━" in rich and "chat" in rich
    code, plain = in_a_terminal(["models", "list"], {**env, "CI": "true"})
    assert code == 0, plain
    assert "\x1b" not in plain and "━" not in plain
    assert plain.splitlines()[0].split() == ["NAME", "DESCRIPTION", "LABELS", "CREATED"]
