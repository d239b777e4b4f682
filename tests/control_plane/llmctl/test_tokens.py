"""llmctl tokens: create (the secret on stdout, once), list (never a secret), revoke (the token
stops working at once); an unknown one is exit 2, and only admins manage tokens (exit 7)."""

from __future__ import annotations

from tests.control_plane.llmctl.conftest import Llmctl, secret_of


def test_tokens_create_list_revoke(llmctl: Llmctl, writer: dict[str, str]) -> None:
    created = llmctl("tokens", "create", "ci", "--scope", "write")
    assert created.code == 0, created
    secret = created.stdout.strip()
    assert secret.startswith("llmcp_") and "not shown again" in created.stderr
    assert llmctl("models", "create", "chat", token=secret).code == 0

    listed = llmctl("tokens", "list", "--json")
    assert listed.code == 0, listed
    tokens = {t["name"]: t for t in listed.document()["items"]}
    assert tokens["ci"]["scope"] == "write"
    assert set(tokens["ci"]) == {"name", "scope", "created_at"}
    assert secret not in listed.stdout
    table = llmctl("tokens", "list")
    assert any(line.split()[:2] == ["ci", "write"] for line in table.stdout.splitlines())

    revoked = llmctl("tokens", "revoke", "ci", "--json")
    assert revoked.document() == {"name": "ci", "revoked": True}
    refused = llmctl("models", "list", "--json", token=secret)
    assert refused.error_document(7)["status"] == 401
    assert "LLMCP_TOKEN" in refused.document()["detail"]

    again = llmctl("tokens", "revoke", "ci", "--json")
    assert again.error_document(2)["error"] == "TokenNotFound"
    assert "no API token named 'ci'" in again.document()["detail"]
    not_admin = llmctl("tokens", "list", "--json", token=secret_of(writer))
    assert not_admin.error_document(7)["status"] == 403
    bad_scope = llmctl("tokens", "create", "x", "--scope", "root", "--json")
    assert "scope" in bad_scope.error_document(2)["detail"]
