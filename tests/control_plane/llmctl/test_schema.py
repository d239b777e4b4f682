"""llmctl schema: the manifest's JSON Schema (valid Draft 2020-12, accepting what the API accepts
and refusing what it refuses) and the --json error document's; no server is needed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from control_plane.llmctl.errors import ERROR_DOCUMENT_SCHEMA
from control_plane.promotions.manifest import manifest_json_schema
from tests.control_plane.llmctl.conftest import Llmctl

EXAMPLE_MANIFEST: dict[str, Any] = {
    "model": "chat",
    "source": "hf://HuggingFaceTB/SmolLM2-135M-Instruct@main",
    "engine_args": {"max_model_len": 2048, "enforce_eager": True},
    "resources": {"device": "auto", "replicas": 1},
    "labels": {"commit": "abc1234"},
    "gates": {
        "smoke": [{"name": "capital", "prompt": "The capital of France is", "max_tokens": 8,
                   "expect": {"contains": ["Paris"], "max_ttft_ms": 2000}}],
        "compare": {"prompts": ["Hello"], "min_identical_share": 0.5},
    },
}


@pytest.fixture(scope="module")
def manifest_schema() -> dict[str, Any]:
    return manifest_json_schema()


def test_schema_manifest_prints_a_valid_json_schema(run_llmctl: Llmctl) -> None:
    for args in (["schema", "manifest"], ["--json", "schema", "manifest"]):
        result = run_llmctl(*args)
        assert result.code == 0, result
        schema = result.document()
        Draft202012Validator.check_schema(schema)
        assert schema == json.loads(json.dumps(manifest_json_schema()))
        Draft202012Validator(schema).validate(EXAMPLE_MANIFEST)


@pytest.mark.parametrize("bad", [
    {"engine_args": {}},
    {"source": "hf://o/m", "gates": {"smoke": [{"prompt": "hi", "expect": {"contain": ["x"]}}]}},
    {"source": "hf://o/m", "gates": {"smoke": [{"prompt": ""}]}},
    {"source": "hf://o/m", "model": "Not A Name"},
], ids=["no-source", "misspelt-expectation", "empty-prompt", "bad-model-name"])
def test_the_manifest_schema_refuses_what_the_api_refuses(manifest_schema: dict[str, Any],
                                                          bad: dict[str, Any]) -> None:
    assert not Draft202012Validator(manifest_schema).is_valid(bad)


def test_schema_error_prints_the_error_document_schema(run_llmctl: Llmctl) -> None:
    result = run_llmctl("schema", "error")
    assert result.code == 0, result
    Draft202012Validator.check_schema(result.document())
    assert result.document() == ERROR_DOCUMENT_SCHEMA
