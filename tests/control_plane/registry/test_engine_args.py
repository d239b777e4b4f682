"""Engine arguments are checked against the installed vLLM's own AsyncEngineArgs fields."""

from __future__ import annotations

import pytest

from control_plane.errors import UnknownEngineArgument
from control_plane.registry.engine_args import check_engine_args, vllm_engine_arg_names


def test_real_vllm_fields_are_read() -> None:
    names = vllm_engine_arg_names()
    assert {"max_model_len", "gpu_memory_utilization", "tensor_parallel_size",
            "max_num_seqs"} <= names


def test_known_arguments_pass() -> None:
    check_engine_args({"max_model_len": 2048, "gpu_memory_utilization": 0.8})


def test_unknown_argument_is_refused_with_close_matches() -> None:
    with pytest.raises(UnknownEngineArgument) as caught:
        check_engine_args({"max_model_length": 2048})
    assert "'max_model_length' is not a vLLM engine argument; did you mean 'max_model_len'" in \
        caught.value.message


def test_argument_without_close_match_points_at_the_docs() -> None:
    with pytest.raises(UnknownEngineArgument, match="see vLLM's EngineArgs"):
        check_engine_args({"zzzz": 1}, known={"max_model_len"})


def test_model_is_reserved_for_the_source() -> None:
    with pytest.raises(UnknownEngineArgument, match="'model' is set from the version's source"):
        check_engine_args({"model": "other"})
