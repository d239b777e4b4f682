"""Measuring gates: send a gate's prompts to a Triton model over gRPC streaming (the stock tensor
interface, as clients do) and turn each answer into an ``Observation``."""

from __future__ import annotations

from tritonclient.utils import InferenceServerException

from control_plane.promotions.gate_checks import Observation
from control_plane.triton.llm_client import GrpcStream

REQUEST_TIMEOUT_S = 120.0


def observe(grpc_url: str, triton_name: str, prompt: str, max_tokens: int,
            temperature: float = 0.0, lora_name: str | None = None) -> Observation:
    """One request (through the LoRA adapter ``lora_name``, when given), timed from submission;
    errors (the model is not there, the request was
    refused, nothing came within the timeout) become the observation's error."""
    try:
        stream = GrpcStream(grpc_url, triton_name)
    except InferenceServerException as exc:
        return Observation("", None, 0, None, 0.0, error=f"cannot reach {grpc_url}: {exc}")
    result = None
    try:
        sampling: dict[str, object] = {"max_tokens": max_tokens, "temperature": temperature}
        if lora_name is not None:
            sampling["lora_name"] = lora_name
        stream.submit(prompt, sampling)
        result = stream.wait(REQUEST_TIMEOUT_S)
    finally:
        # Only an unfinished request is cancelled: cancelling a finished gRPC stream leaves the
        # model unable to finish unloading on Triton r24.10 (README, design notes).
        stream.close(cancel=result is None or result.done_at is None)
    if result.done_at is None:
        return Observation(result.text, None, result.num_output_tokens, None,
                           REQUEST_TIMEOUT_S * 1000,
                           error=f"no answer within {REQUEST_TIMEOUT_S:g} s")
    ttft = None if result.first_token_at is None else \
        (result.first_token_at - result.submitted_at) * 1000
    return Observation(result.text, result.finish_reasons[-1] if result.finish_reasons else None,
                       result.num_output_tokens, ttft,
                       (result.done_at - result.submitted_at) * 1000,
                       error=result.error)
