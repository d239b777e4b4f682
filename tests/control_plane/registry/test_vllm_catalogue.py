"""The catalogue a control plane without vLLM (its slim image) checks versions against: it must
say what the pinned vLLM says, and be what such a control plane reads."""

from __future__ import annotations

import json
from typing import Any

import pytest

from control_plane.errors import UnknownEngineArgument
from control_plane.registry import vllm_catalogue
from control_plane.registry.engine_args import check_engine_args, vllm_engine_arg_names
from control_plane.registry.validation import vllm_architectures


def test_the_file_matches_the_installed_vllm() -> None:
    written = json.loads(vllm_catalogue.CATALOGUE.read_text())
    installed = vllm_catalogue.read_installed()
    assert written == installed, (
        "control_plane/registry/vllm_catalogue.json is stale: run "
        "'python -m control_plane.registry.vllm_catalogue write'")


def test_without_vllm_the_file_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_catalogue, "vllm_installed", lambda: False)
    vllm_catalogue._catalogue.cache_clear()
    try:
        assert "max_model_len" in vllm_engine_arg_names()
        assert "LlamaForCausalLM" in vllm_architectures()
        with pytest.raises(UnknownEngineArgument, match="did you mean 'max_model_len'"):
            check_engine_args({"max_model_length": 512})
    finally:
        vllm_catalogue._catalogue.cache_clear()


def test_the_file_of_the_installed_distribution_is_read_without_starting_vllm(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # It names the distribution it was written from, the one installed here (the test above).
    assert vllm_catalogue.read_written()["distribution"] == \
        vllm_catalogue.installed_distribution()

    def no_child() -> dict[str, Any]:
        raise AssertionError("vLLM was imported in a child although the file is its own")

    monkeypatch.setattr(vllm_catalogue, "read_installed", no_child)
    vllm_catalogue._catalogue.cache_clear()
    try:
        assert vllm_catalogue.catalogue() == vllm_catalogue.read_written()
    finally:
        vllm_catalogue._catalogue.cache_clear()


def test_another_installed_vllm_is_asked_rather_than_the_file(
        monkeypatch: pytest.MonkeyPatch) -> None:
    other = {"name": "vllm", "version": "99.0.0"}
    asked = {"distribution": other, "vllm": "99.0.0", "engine_args": ["brand_new_argument"],
             "architectures": []}
    monkeypatch.setattr(vllm_catalogue, "installed_distribution", lambda: other)
    monkeypatch.setattr(vllm_catalogue, "read_installed", lambda: asked)
    vllm_catalogue._catalogue.cache_clear()
    try:
        assert vllm_catalogue.catalogue() == asked
        assert "brand_new_argument" in vllm_engine_arg_names()
    finally:
        vllm_catalogue._catalogue.cache_clear()
