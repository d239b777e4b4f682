"""Unit tests for the pure helpers in llm_backend.engine (no engine is started)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from vllm import AsyncEngineArgs

from llm_backend.engine import EngineHost, GenerationJob, engine_args_from
from llm_backend.outputs import OutputChunk, SequenceProgress
from llm_backend.priority import PriorityLevels
from llm_backend.request import RawRequest, parse_request
from llm_backend.settings import SettingsError

LEVELS = PriorityLevels(count=3, default=3)


def seq(index: int, token_ids: list[int], text: str = "", finish_reason: str | None = None):
    return SimpleNamespace(index=index, token_ids=token_ids, text=text, finish_reason=finish_reason)


def output(*seqs, finished: bool = False):
    return SimpleNamespace(outputs=list(seqs), finished=finished)


class NullSink:
    def send(self, chunk, final):  # pragma: no cover - not called here
        raise AssertionError("not used")

    def fail(self, error):  # pragma: no cover
        raise AssertionError("not used")

    def is_cancelled(self) -> bool:
        return False


def make_job(prompt: str = "Hi there", prompt_ids=(1, 2, 3), **raw_kwargs) -> GenerationJob:
    request = parse_request(RawRequest(text_input=prompt, **raw_kwargs), LEVELS)
    return GenerationJob(request, list(prompt_ids), NullSink(), lambda: None)


# -- engine_args_from ----------------------------------------------------------------------------


def test_engine_args_from_builds_async_engine_args():
    args = engine_args_from({"model": "x", "max_num_seqs": 2, "scheduling_policy": "priority"})
    assert isinstance(args, AsyncEngineArgs)
    assert args.model == "x"
    assert args.max_num_seqs == 2
    assert args.scheduling_policy == "priority"


def test_engine_args_from_unknown_key_suggests():
    with pytest.raises(SettingsError) as info:
        engine_args_from({"model": "x", "max_num_seq": 2})
    message = str(info.value)
    assert message.startswith("model.json: 'max_num_seq' is not a vLLM engine argument")
    assert "did you mean" in message
    assert "max_num_seqs" in message.split("did you mean", 1)[1]


@pytest.mark.parametrize(("typo", "suggestion"),
                         [("max_model_length", "max_model_len"), ("enforce_eagr", "enforce_eager")])
def test_engine_args_from_other_typos(typo, suggestion):
    with pytest.raises(SettingsError, match=suggestion):
        engine_args_from({"model": "x", typo: 1})


def test_engine_args_from_unknown_key_without_match():
    with pytest.raises(SettingsError) as info:
        engine_args_from({"model": "x", "zzzzqqqqxxxx": 1})
    assert "'zzzzqqqqxxxx' is not a vLLM engine argument" in str(info.value)
    assert "did you mean" not in str(info.value)


# -- _count_new_tokens ---------------------------------------------------------------------------


def test_count_new_tokens_delta():
    progress = SequenceProgress()
    assert EngineHost._count_new_tokens(output(seq(0, [5, 6])), progress, True) == 2
    assert progress.tokens == {0: 2}
    assert EngineHost._count_new_tokens(output(seq(0, [7])), progress, True) == 1
    assert EngineHost._count_new_tokens(output(seq(0, [])), progress, True) == 0
    assert EngineHost._count_new_tokens(output(seq(0, [8, 9, 10])), progress, True) == 3
    assert progress.tokens == {0: 6}
    assert sum(progress.tokens.values()) == 6


def test_count_new_tokens_cumulative():
    progress = SequenceProgress()
    assert EngineHost._count_new_tokens(output(seq(0, [5, 6])), progress, False) == 2
    assert EngineHost._count_new_tokens(output(seq(0, [5, 6, 7])), progress, False) == 1
    assert EngineHost._count_new_tokens(output(seq(0, [5, 6, 7])), progress, False) == 0
    assert EngineHost._count_new_tokens(output(seq(0, [5, 6, 7, 8, 9])), progress, False) == 2
    assert progress.tokens == {0: 5}


@pytest.mark.parametrize("delta", [True, False])
def test_count_new_tokens_single_final_output(delta):
    # FINAL_ONLY sends one output with every token: delta and cumulative agree from zero
    progress = SequenceProgress()
    assert EngineHost._count_new_tokens(output(seq(0, [1, 2, 3, 4])), progress, delta) == 4
    assert progress.tokens == {0: 4}


def test_count_new_tokens_several_sequences_delta():
    progress = SequenceProgress()
    first = output(seq(0, [1, 2]), seq(1, [3]))
    assert EngineHost._count_new_tokens(first, progress, True) == 3
    # sequences may arrive in any order, and only some of them
    second = output(seq(1, [4, 5]))
    assert EngineHost._count_new_tokens(second, progress, True) == 2
    assert progress.tokens == {0: 2, 1: 3}
    third = output(seq(1, [6]), seq(0, [7]))
    assert EngineHost._count_new_tokens(third, progress, True) == 2
    assert progress.tokens == {0: 3, 1: 4}
    assert sum(progress.tokens.values()) == 7


def test_count_new_tokens_several_sequences_cumulative():
    progress = SequenceProgress()
    assert EngineHost._count_new_tokens(output(seq(0, [1]), seq(1, [2, 3])), progress, False) == 3
    assert EngineHost._count_new_tokens(output(seq(0, [1, 4]), seq(1, [2, 3])), progress, False) == 1
    assert progress.tokens == {0: 2, 1: 2}


def test_sequence_progress_default_empty():
    assert sum(SequenceProgress().tokens.values()) == 0


# -- _chunk --------------------------------------------------------------------------------------


def test_chunk_non_streaming_includes_prompt():
    job = make_job(prompt="Hi there")
    assert job.request.include_prompt_in_output is True
    out = output(seq(0, [10, 11], " you", "length"), finished=True)
    chunk = EngineHost._chunk(job, out)
    assert chunk == OutputChunk(
        texts=["Hi there you"], finish_reasons=["length"], num_output_tokens=[2],
        num_input_tokens=3,
    )


def test_chunk_excluded_prompt():
    job = make_job(prompt="Hi", exclude_input_in_output=True)
    chunk = EngineHost._chunk(job, output(seq(0, [1], " x", "stop")))
    assert chunk.texts == [" x"]


def test_chunk_streaming_excludes_prompt_by_default():
    job = make_job(prompt="Hi", stream=True)
    chunk = EngineHost._chunk(job, output(seq(0, [1], " x")))
    assert chunk.texts == [" x"]
    assert chunk.finish_reasons == [""]


def test_chunk_prompt_only_on_first_response():
    job = make_job(prompt="Q:", prompt_ids=[1, 2], stream=True, exclude_input_in_output=False)
    assert job.request.include_prompt_in_output is True
    assert job.responded is False
    first = EngineHost._chunk(job, output(seq(0, [7], " A")))
    assert first.texts == ["Q: A"]
    job.responded = True
    second = EngineHost._chunk(job, output(seq(0, [8], "B", "stop"), finished=True))
    assert second.texts == ["B"]
    assert second.finish_reasons == ["stop"]
    assert second.num_input_tokens == 2


def test_chunk_not_responded_but_prompt_excluded():
    job = make_job(prompt="Q:", exclude_input_in_output=True)
    job.responded = True
    assert EngineHost._chunk(job, output(seq(0, [1], "a"))).texts == ["a"]


def test_chunk_several_sequences():
    job = make_job(prompt="P ", prompt_ids=[1], sampling_parameters='{"n": 2}')
    out = output(seq(0, [1, 2, 3], "abc", "length"), seq(1, [4], "d", None), finished=True)
    chunk = EngineHost._chunk(job, out)
    assert chunk.texts == ["P abc", "P d"]
    assert chunk.finish_reasons == ["length", ""]
    assert chunk.num_output_tokens == [3, 1]
    assert chunk.num_input_tokens == 1


def test_chunk_no_outputs():
    job = make_job()
    chunk = EngineHost._chunk(job, output())
    assert chunk == OutputChunk(texts=[], finish_reasons=[], num_output_tokens=[],
                                num_input_tokens=3)


def test_generation_job_defaults():
    a, b = make_job(), make_job()
    assert a.aborted is False
    assert a.responded is False
    assert isinstance(a.request_id, str) and len(a.request_id) == 32
    assert a.request_id != b.request_id
    assert a.arrived <= b.arrived
