"""llmctl models and versions: create, list, show; register from YAML and JSON manifests, dry
runs that store nothing, archive; a bad manifest refused locally, naming its fields."""

from __future__ import annotations

from pathlib import Path

from control_plane.registry.schemas import ModelOut, VersionOut
from tests.control_plane.llmctl.conftest import Llmctl, write_manifest


def test_models_create_list_show(llmctl: Llmctl) -> None:
    created = llmctl("models", "create", "chat", "--description", "the assistant",
                     "--label", "team=search", "--json")
    assert created.code == 0, created
    assert ModelOut.model_validate(created.document()).labels == {"team": "search"}
    assert llmctl("models", "create", "other", "--json").code == 0

    listed = llmctl("models", "list", "--json")
    assert listed.code == 0, listed
    assert [m["name"] for m in listed.document()["items"]] == ["chat", "other"]
    filtered = llmctl("--json", "models", "list", "--label", "team=search").document()
    assert [m["name"] for m in filtered["items"]] == ["chat"]

    shown = llmctl("models", "show", "chat", "--json")
    assert ModelOut.model_validate(shown.document()).description == "the assistant"

    table = llmctl("models", "list")
    assert table.code == 0
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["NAME", "DESCRIPTION", "LABELS", "CREATED"]
    assert rows[0].startswith("chat") and "team=search" in rows[0]


def test_missing_model_and_taken_name(llmctl: Llmctl) -> None:
    missing = llmctl("models", "show", "ghost", "--json")
    assert missing.error_document(2)["error"] == "ModelNotFound"
    assert "model 'ghost' does not exist" in missing.document()["detail"]
    assert llmctl("models", "create", "chat").code == 0
    taken = llmctl("models", "create", "chat")
    assert taken.code == 6
    assert "already exists" in taken.stderr and taken.stdout == ""


def test_versions_register_from_yaml_and_json_then_list_show_archive(
        llmctl: Llmctl, weights: Path, tmp_path: Path) -> None:
    assert llmctl("models", "create", "chat").code == 0
    manifest = {"model": "chat", "source": str(weights),
                "engine_args": {"max_model_len": 2048}, "labels": {"commit": "abc123"},
                "gates": {"smoke": [{"prompt": "Say hi", "expect": {"contains": ["hi"]}}]}}
    from_yaml = llmctl("versions", "register", "chat", "-f",
                       str(write_manifest(tmp_path, "v1.yaml", manifest)), "--json")
    assert from_yaml.code == 0, from_yaml
    first = VersionOut.model_validate(from_yaml.document())
    assert (first.number, first.labels, first.engine_args) == (1, {"commit": "abc123"},
                                                               {"max_model_len": 2048})
    assert first.gates.smoke[0].expect.contains == ["hi"]

    without_model = {key: value for key, value in manifest.items() if key != "model"}
    from_json = llmctl("versions", "register", "chat", "--file",
                       str(write_manifest(tmp_path, "v2.json", without_model)))
    assert from_json.code == 0, from_json
    assert "registered version 2 of 'chat'" in from_json.stdout

    listed = llmctl("versions", "list", "chat", "--json").document()
    assert [v["number"] for v in listed["items"]] == [2, 1]
    shown = llmctl("versions", "show", "chat", "2", "--json")
    assert VersionOut.model_validate(shown.document()).source == str(weights.resolve())

    archived = llmctl("versions", "archive", "chat", "1", "--json")
    assert archived.code == 0, archived
    assert archived.document()["state"] == "archived"


def test_dry_run_checks_with_the_server_and_registers_nothing(
        llmctl: Llmctl, weights: Path, tmp_path: Path) -> None:
    assert llmctl("models", "create", "chat").code == 0
    good = write_manifest(tmp_path, "good.yaml", {"source": str(weights)})
    preview = llmctl("versions", "register", "chat", "-f", str(good), "--dry-run", "--json")
    assert preview.code == 0, preview
    assert VersionOut.model_validate(preview.document()).source == str(weights.resolve())
    human = llmctl("versions", "register", "chat", "-f", str(good), "--dry-run")
    assert "nothing was registered" in human.stdout

    # Only the server knows its source roots: refused there, still before storing anything.
    outside = write_manifest(tmp_path, "outside.yaml", {"source": str(tmp_path)})
    refused = llmctl("versions", "register", "chat", "-f", str(outside), "--dry-run", "--json")
    assert refused.error_document(2)["error"] == "InvalidSource"
    assert llmctl("versions", "list", "chat", "--json").document()["total"] == 0


def test_a_bad_manifest_exits_2_naming_every_field_before_any_request(
        run_llmctl: Llmctl, tmp_path: Path) -> None:
    bad = write_manifest(tmp_path, "bad.yaml", {
        "source": "hf://org/m", "engine_arg": {},
        "gates": {"smoke": [{"prompt": "hi", "expect": {"contain": ["x"]}}]}})
    # Nothing listens at this URL: exit 2, not 5, shows that no request was sent.
    env = {"LLMCP_URL": "http://127.0.0.1:9", "LLMCP_TOKEN": "llmcp_unused"}
    result = run_llmctl("versions", "register", "chat", "-f", str(bad), "--json", env=env)
    document = result.error_document(2)
    assert document["error"] == "InvalidManifest"
    assert any(problem.startswith("engine_arg:") for problem in document["problems"])
    assert any(problem.startswith("gates.smoke[0].expect.contain:")
               for problem in document["problems"])

    human = run_llmctl("versions", "register", "chat", "-f", str(bad), env=env)
    assert human.code == 2 and human.stdout == ""
    assert "gates.smoke[0].expect.contain" in human.stderr

    other_model = write_manifest(tmp_path, "other.yaml", {"model": "other", "source": "hf://o/m"})
    mismatch = run_llmctl("versions", "register", "chat", "-f", str(other_model), env=env)
    assert mismatch.code == 2 and "is for model 'other', not 'chat'" in mismatch.stderr

    not_yaml = tmp_path / "broken.yaml"
    not_yaml.write_text("source: [unclosed\n")
    broken = run_llmctl("versions", "register", "chat", "-f", str(not_yaml), env=env)
    assert broken.code == 2 and "is not valid YAML" in broken.stderr
    missing = run_llmctl("versions", "register", "chat", "-f", str(tmp_path / "none.yaml"),
                         env=env)
    assert missing.code == 2 and "cannot read manifest" in missing.stderr
