"""Reading an adapter's config and checking it against a version, and parsing the backend's
control answer: pure functions, table-driven."""

from __future__ import annotations

import json
from typing import Any

import pytest

from control_plane.adapters.checks import check_fits_version, check_serves_lora, source_model_name
from control_plane.adapters.peft_config import AdapterConfig
from control_plane.errors import InvalidAdapter
from control_plane.triton.adapter_protocol import AdapterAnswerError, LoadedAdapter, parse_listing

LABEL = "version 1 of 'm'"


@pytest.mark.parametrize("source,name", [
    ("/models/SmolLM2-135M-Instruct", "smollm2-135m-instruct"),
    ("/models/SmolLM2-135M-Instruct/", "smollm2-135m-instruct"),
    ("hf://HuggingFaceTB/SmolLM2-135M-Instruct@main", "smollm2-135m-instruct"),
    ("hf://org/repo@refs/pr/1", "repo"),
    ("s3://bucket/models/llama-3", "llama-3"),
])
def test_the_model_name_of_a_source(source: str, name: str) -> None:
    assert source_model_name(source) == name


@pytest.mark.parametrize("base,engine_args,problem", [
    ("SmolLM2-135M-Instruct", {"enable_lora": True}, None),
    ("./checkpoints/smollm2-135m-instruct/", {"enable_lora": True}, None),
    ("org/chat", {"enable_lora": True, "served_model_name": "Chat"}, None),
    ("org/other", {"enable_lora": True},
     "case-insensitively, 'other' with 'smollm2-135m-instruct'"),
    ("SmolLM2-135M-Instruct", {"enable_lora": True, "max_lora_rank": 4},
     "rank 8 is over the max_lora_rank 4 of version 1 of 'm'"),
])
def test_fit_with_a_version(base: str, engine_args: dict[str, Any], problem: str | None) -> None:
    config = AdapterConfig(rank=8, target_modules=["q_proj"], base_model=base)
    if problem is None:
        check_fits_version(config, LABEL, "/models/SmolLM2-135M-Instruct", engine_args)
        return
    with pytest.raises(InvalidAdapter, match=problem.replace("(", r"\(")):
        check_fits_version(config, LABEL, "/models/SmolLM2-135M-Instruct", engine_args)


@pytest.mark.parametrize("engine_args", [{}, {"enable_lora": False}, {"enable_lora": "true"}])
def test_a_version_serves_lora_only_with_enable_lora_true(engine_args: dict[str, Any]) -> None:
    with pytest.raises(InvalidAdapter, match="set enable_lora, max_loras and max_lora_rank"):
        check_serves_lora(LABEL, engine_args)
    check_serves_lora(LABEL, {"enable_lora": True})


def test_the_backends_answer_is_parsed_or_refused_naming_the_problem() -> None:
    answer = {"adapters": [{"name": "french", "path": "/a/french", "rank": 8,
                            "requests_in_flight": 0}], "max_loras": 2, "max_lora_rank": 16}
    listing = parse_listing(json.dumps(answer))
    assert listing.adapters == (LoadedAdapter("french", "/a/french", 8, 0),)
    assert (listing.names, listing.max_loras, listing.max_lora_rank) == ({"french"}, 2, 16)
    assert listing.as_json() == answer
    for text in ("", "not json", json.dumps({"adapters": [{"name": "x"}]}), "[]"):
        with pytest.raises(AdapterAnswerError, match="not the expected JSON"):
            parse_listing(text)
