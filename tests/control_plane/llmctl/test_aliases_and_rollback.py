"""llmctl aliases (set, show, list, history, delete) and rollback of an alias that is not
deployed (a move, answered 200); refusals come back as exit 6 with the server's reason."""

from __future__ import annotations

from control_plane.registry.schemas import AliasOut
from tests.control_plane.llmctl.conftest import Llmctl, api


def _versions(live_url: str, admin: dict[str, str], count: int) -> None:
    with api(live_url, admin) as http:
        assert http.post("/models", json={"name": "chat"}).status_code == 201
        for _ in range(count):
            assert http.post("/models/chat/versions",
                             json={"source": "hf://org/chat"}).status_code == 201


def test_aliases_set_show_list_history_delete(llmctl: Llmctl, live_url: str,
                                             admin: dict[str, str]) -> None:
    _versions(live_url, admin, 2)
    created = llmctl("aliases", "set", "chat", "production", "--version", "1", "--json")
    assert created.code == 0, created
    assert AliasOut.model_validate(created.document()).version == 1
    moved = llmctl("aliases", "set", "chat", "production", "--version", "2")
    assert moved.code == 0, moved
    assert "alias 'production' of 'chat' now points at version 2" in moved.stdout

    shown = llmctl("aliases", "show", "chat", "production", "--json").document()
    assert (shown["name"], shown["version"]) == ("production", 2)
    listed = llmctl("aliases", "list", "chat", "--json").document()
    assert [(a["name"], a["version"]) for a in listed] == [("production", 2)]
    history = llmctl("aliases", "history", "chat", "production", "--json").document()
    assert [(m["from_version"], m["to_version"]) for m in history["items"]] == [(1, 2),
                                                                                 (None, 1)]

    missing = llmctl("aliases", "set", "chat", "production", "--version", "9", "--json")
    assert missing.error_document(2)["error"] == "VersionNotFound"
    deleted = llmctl("aliases", "delete", "chat", "production", "--json")
    assert deleted.document() == {"model": "chat", "alias": "production", "deleted": True}
    assert llmctl("aliases", "show", "chat", "production").code == 2


def test_rollback_of_an_alias_not_deployed_moves_it_back(llmctl: Llmctl, live_url: str,
                                                         admin: dict[str, str]) -> None:
    _versions(live_url, admin, 3)
    for version in ("1", "3"):
        assert llmctl("aliases", "set", "chat", "production", "--version", version).code == 0

    back = llmctl("rollback", "chat", "--alias", "production", "--json")
    assert back.code == 0, back
    assert AliasOut.model_validate(back.document()).version == 1
    to_two = llmctl("rollback", "chat", "--alias", "production", "--to", "2")
    assert to_two.code == 0, to_two
    assert "now points at version 2" in to_two.stdout

    assert llmctl("versions", "archive", "chat", "3").code == 0
    archived = llmctl("rollback", "chat", "--alias", "production", "--to", "3", "--json")
    assert "is archived" in archived.error_document(6)["detail"]
    same = llmctl("rollback", "chat", "--alias", "production", "--to", "2")
    assert same.code == 6 and "already points at version 2" in same.stderr
    missing = llmctl("rollback", "chat", "--alias", "staging", "--json")
    assert missing.error_document(2)["error"] == "AliasNotFound"
