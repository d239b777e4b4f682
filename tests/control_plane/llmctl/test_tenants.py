"""llmctl tenants: create, list, show, update (only what is given), delete, and keys: create (the
secret on stdout, once), list (never a secret), revoke; errors keep their exit codes."""

from __future__ import annotations

from typing import Any

import httpx

from tests.control_plane.llmctl.conftest import Llmctl, secret_of


def test_tenants_create_list_show_update_delete(llmctl: Llmctl) -> None:
    created = llmctl("tenants", "create", "demo", "--json")
    assert created.code == 0, created
    assert {k: v for k, v in created.document().items() if not k.endswith("_at")} == {
        "name": "demo", "allowed_models": ["*"], "max_priority_level": 1,
        "default_priority_level": None, "priority_over_limit": "refuse", "enabled": True,
        "limits": {"requests_per_minute": None, "tokens_per_minute": None,
                   "concurrent_requests": None, "daily_tokens": None}, "model_limits": {},
        "weight": 1.0}
    batch = llmctl("tenants", "create", "batch", "--model", "smollm2", "--model", "chat",
                   "--max-priority-level", "2", "--default-priority-level", "3",
                   "--over-limit", "lower", "--disabled")
    assert batch.code == 0, batch
    assert "created tenant 'batch'" in batch.stdout
    assert "allowed_models:" in batch.stdout and "smollm2,chat" in batch.stdout

    listed = llmctl("tenants", "list")
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert rows[0][:2] == ["NAME", "ENABLED"]
    assert rows[1] == ["batch", "no", "smollm2,chat", "2", "3", "lower"]
    assert rows[2] == ["demo", "yes", "*", "1", "-", "refuse"]
    assert llmctl("tenants", "list", "--json").document()["total"] == 2

    updated = llmctl("tenants", "update", "batch", "--enabled", "--default-priority-level",
                     "none", "--weight", "2.5", "--json")
    assert updated.code == 0, updated
    document = updated.document()
    assert (document["enabled"], document["default_priority_level"],
            document["allowed_models"], document["weight"]) == (True, None, ["smollm2", "chat"],
                                                                2.5)
    shown = llmctl("tenants", "show", "batch")
    assert "default_priority_level: -" in shown.stdout.replace("  ", " ")

    assert llmctl("tenants", "delete", "batch", "--json").document() == \
        {"name": "batch", "deleted": True}
    gone = llmctl("tenants", "show", "batch", "--json")
    assert gone.error_document(2)["error"] == "TenantNotFound"


def test_tenant_errors_name_the_fix(llmctl: Llmctl, reader: dict[str, str]) -> None:
    assert llmctl("tenants", "create", "demo").code == 0
    again = llmctl("tenants", "create", "demo", "--json")
    assert again.error_document(6)["detail"] == \
        "tenant 'demo' already exists; PATCH it or pick another name"
    too_urgent = llmctl("tenants", "update", "demo", "--max-priority-level", "2",
                        "--default-priority-level", "1", "--json")
    assert "default_priority_level 1 is more urgent than max_priority_level 2" in \
        too_urgent.error_document(2)["detail"]
    nothing = llmctl("tenants", "update", "demo", "--json")
    assert nothing.error_document(2)["detail"].startswith("nothing to change")
    not_a_level = llmctl("tenants", "update", "demo", "--default-priority-level", "high",
                         "--json")
    assert "'high' is not a level" in not_a_level.error_document(2)["detail"]
    over = llmctl("tenants", "update", "demo", "--over-limit", "drop", "--json")
    assert "priority_over_limit" in over.error_document(2)["detail"]
    # Reading needs read, changing needs admin.
    assert llmctl("tenants", "list", token=secret_of(reader)).code == 0
    refused = llmctl("tenants", "delete", "demo", "--json", token=secret_of(reader))
    assert refused.error_document(7)["status"] == 403


def test_tenant_keys_create_list_revoke(llmctl: Llmctl) -> None:
    assert llmctl("tenants", "create", "demo").code == 0
    created = llmctl("tenants", "keys", "create", "demo", "web")
    assert created.code == 0, created
    secret = created.stdout.strip()
    assert secret.startswith("llmgw_") and "not shown again" in created.stderr
    as_json = llmctl("tenants", "keys", "create", "demo", "cli", "--json").document()
    assert set(as_json) == {"id", "name", "prefix", "key", "created_at"}

    listed = llmctl("tenants", "keys", "list", "demo", "--json")
    keys = {k["name"]: k for k in listed.document()["items"]}
    assert secret not in listed.stdout and as_json["key"] not in listed.stdout
    assert keys["web"]["prefix"] == secret[:12] and keys["web"]["revoked"] is False

    web = str(keys["web"]["id"])
    assert llmctl("tenants", "keys", "revoke", "demo", web, "--json").document() == \
        {"tenant": "demo", "id": keys["web"]["id"], "revoked": True}
    table = llmctl("tenants", "keys", "list", "demo")
    rows = {line.split()[1]: line for line in table.stdout.splitlines()[1:]}
    assert rows["web"].rstrip().endswith("Z") and rows["cli"].rstrip().endswith("-")

    unknown = llmctl("tenants", "keys", "revoke", "demo", "999999", "--json")
    assert unknown.error_document(2)["error"] == "InferenceKeyNotFound"
    taken = llmctl("tenants", "keys", "create", "demo", "web", "--json")
    assert "already has a key named 'web'" in taken.error_document(6)["detail"]


def test_tenants_limits_set_lift_and_show_per_tenant_and_per_model(llmctl: Llmctl) -> None:
    assert llmctl("tenants", "create", "acme", "--model", "smollm2", "--model", "chat").code == 0
    set_own = llmctl("tenants", "limits", "acme", "--requests-per-minute", "60",
                     "--tokens-per-minute", "20000", "--json")
    assert set_own.code == 0, set_own
    assert set_own.document()["limits"]["requests_per_minute"] == 60
    on_chat = llmctl("tenants", "limits", "acme", "--model", "chat", "--concurrent-requests",
                     "2", "--json").document()
    assert on_chat["model_limits"]["chat"]["concurrent_requests"] == 2
    assert on_chat["limits"]["tokens_per_minute"] == 20000  # the others stay
    lifted = llmctl("tenants", "limits", "acme", "--tokens-per-minute", "none", "--json")
    assert lifted.document()["limits"]["tokens_per_minute"] is None
    assert lifted.document()["limits"]["requests_per_minute"] == 60
    shown = llmctl("tenants", "limits", "acme", env={"CI": "true"})
    rows = [line.split() for line in shown.stdout.splitlines()]
    assert rows[0][:2] == ["SCOPE", "REQUESTS/MIN"]
    assert rows[1] == ["(all", "models)", "60", "-", "-", "-"]
    assert rows[2] == ["chat", "-", "-", "2", "-"]
    bad = llmctl("tenants", "limits", "acme", "--daily-tokens", "lots", "--json")
    assert "not a limit" in bad.error_document(2)["detail"]
    stray = llmctl("tenants", "limits", "acme", "--model", "other", "--daily-tokens", "5",
                   "--json")
    assert "model_limits name other" in stray.error_document(2)["detail"]


def test_tenants_usage_as_a_table_and_as_json(llmctl: Llmctl, live_url: str,
                                              session_factory: Any) -> None:
    from control_plane.auth.scopes import Scope
    from tests.control_plane.conftest import issue_token

    assert llmctl("tenants", "create", "acme").code == 0
    gateway = issue_token(session_factory, "gateway", Scope.REPORT)
    hour = "2026-12-01T10:00:00+00:00"
    sent = httpx.post(f"{live_url}/api/v1/usage", headers=gateway, json={
        "id": "report-0001", "gateway": "gw", "entries": [
            {"tenant": "acme", "model": "m", "hour": hour, "requests": 4, "prompt_tokens": 40,
             "output_tokens": 16, "refusals": {"requests_per_minute": 1}}]})
    assert sent.status_code == 200, sent.text
    window = ("--since", "2026-12-01T00:00:00Z", "--until", "2026-12-01T23:00:00Z")
    document = llmctl("tenants", "usage", "acme", *window, "--json").document()
    assert document["totals"]["requests"] == 4
    table = llmctl("tenants", "usage", "acme", *window, "--group-by", "hour", env={"CI": "true"})
    rows = [line.split() for line in table.stdout.splitlines()]
    assert rows[0][:2] == ["HOUR", "REQUESTS"]
    assert rows[-1][:4] == ["(total)", "4", "40", "16"]
    assert "requests_per_minute" in table.stdout
