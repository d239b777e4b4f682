"""Which running requests fair share may stop and resume later, and how one resumes.

vLLM preempts only when its KV cache runs out, never for another tenant; so the backend stops a
request itself (aborts it in vLLM) and starts it again later with the tokens it already streamed
appended to its prompt: "preemption by recompute", as vLLM does internally, with the prefix cache
making the re-read cheap. The client sees its stream pause, then go on where it was.

A request that has sent nothing yet starts again from scratch, which is always exact. One that has
streamed may only continue where the continuation is the same request: not with ``n > 1``
(sequences would restart), a structured output (the grammar's state is lost), stop strings (one
could straddle the cut and be missed), a seed (the random stream would restart), presence or
frequency penalties (they count only generated tokens, which become prompt tokens), or a
cumulative logprob (the sum would restart).
"""

from __future__ import annotations

from vllm import SamplingParams

from llm_backend.request import GenerationRequest


def resumable(request: GenerationRequest) -> bool:
    """Whether a request that has streamed tokens can continue after a preemption."""
    sampling = request.sampling
    return (
        request.streaming
        and sampling.n == 1
        and sampling.structured_outputs is None
        and not sampling.stop
        and sampling.seed is None
        and sampling.presence_penalty == 0
        and sampling.frequency_penalty == 0
        and not request.return_cumulative_logprob
    )


def resume_sampling(sampling: SamplingParams, generated: int) -> SamplingParams:
    """The sampling parameters that continue a request after ``generated`` tokens."""
    resumed = sampling.clone()
    if resumed.max_tokens is not None:
        resumed.max_tokens = max(1, resumed.max_tokens - generated)
    resumed.min_tokens = max(0, resumed.min_tokens - generated)
    # The prompt's logprobs went out in the first response; the prompt is now longer.
    resumed.prompt_logprobs = None
    return resumed
