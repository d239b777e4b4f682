"""Which running requests may be preempted and resumed, and the sampling a resumed one runs with."""

from __future__ import annotations

import json

import pytest

from llm_backend.engine import GenerationJob
from llm_backend.preemption import resumable, resume_sampling
from llm_backend.priority import PriorityLevels
from llm_backend.request import GenerationRequest, RawRequest, parse_request

LEVELS = PriorityLevels(count=3, default=3)


def request(stream: bool = True, **sampling: object) -> GenerationRequest:
    return parse_request(RawRequest(text_input="Hi", stream=stream,
                                    sampling_parameters=json.dumps(sampling)), LEVELS)


def test_a_plain_stream_can_continue_after_a_preemption():
    assert resumable(request(max_tokens=20, temperature=0.7, top_p=0.9, repetition_penalty=1.1))


@pytest.mark.parametrize("sampling", [
    {"n": 2},
    {"stop": ["\n"]},
    {"seed": 7},
    {"presence_penalty": 0.5},
    {"frequency_penalty": 0.5},
    {"structured_outputs": {"choice": ["yes", "no"]}},
])
def test_streams_whose_continuation_would_differ_cannot(sampling):
    assert not resumable(request(**sampling))


def test_a_request_that_is_not_streamed_is_never_continued():
    assert not resumable(request(stream=False))


def test_a_cumulative_logprob_cannot_be_continued():
    raw = RawRequest(text_input="Hi", stream=True, return_cumulative_logprob=True)
    assert not resumable(parse_request(raw, LEVELS))


@pytest.mark.parametrize("responded, sampling, expected", [
    (False, {"seed": 7}, True),   # nothing sent: it starts over, exactly
    (True, {"seed": 7}, False),
    (True, {}, True),
])
def test_a_job_is_preemptible_if_it_sent_nothing_or_can_continue(responded, sampling, expected):
    job = GenerationJob(request(**sampling), [1, 2], sink=None, on_done=lambda: None)
    job.responded = responded
    assert job.preemptible is expected
    job.aborted = True
    assert job.preemptible is False


def test_a_resumed_request_generates_only_what_is_left():
    original = request(max_tokens=48, min_tokens=10, prompt_logprobs=2).sampling
    resumed = resume_sampling(original, 6)
    assert (resumed.max_tokens, resumed.min_tokens, resumed.prompt_logprobs) == (42, 4, None)
    # The original is untouched (it is the request's own).
    assert (original.max_tokens, original.min_tokens, original.prompt_logprobs) == (48, 10, 2)
    assert resume_sampling(original, 20).min_tokens == 0
    assert resume_sampling(request().sampling, 5).max_tokens == request().sampling.max_tokens - 5
