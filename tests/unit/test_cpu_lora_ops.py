"""Unit tests for llm_backend.cpu_lora_ops: base-model tokens (LoRA index -1) get no adapter on
the CPU, and every other token gets exactly what vLLM's own op gives it."""

from __future__ import annotations

import pytest
import torch
from vllm import AsyncEngineArgs

# Before llm_backend.cpu_lora_ops replaces them in lora_ops: the package keeps vLLM's originals.
from vllm.lora.ops.torch_ops import bgmv_expand as vllm_expand
from vllm.lora.ops.torch_ops import bgmv_expand_slice as vllm_expand_slice
from vllm.lora.ops.torch_ops import bgmv_shrink as vllm_shrink
from vllm.lora.ops.torch_ops import lora_ops
from vllm.lora.punica_wrapper import punica_cpu
from vllm.utils.import_utils import resolve_obj_by_qualname

from llm_backend import cpu_lora_ops
from llm_backend.engine import CPU_LORA_EXTENSION, with_cpu_lora_fix
from llm_backend.settings import SettingsError

# Three adapter slots, four tokens: slots 0 and 2, no adapter, slot 1.
INDICES = torch.tensor([0, 2, -1, 1])
BASE = 2


def random(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


def test_vllms_cpu_op_gives_base_tokens_the_last_adapter_and_ours_does_not():
    assert cpu_lora_ops.applies_adapters_to_base_tokens(vllm_shrink), (
        "vLLM fixed its CPU LoRA ops: drop llm_backend/cpu_lora_ops.py")
    assert not cpu_lora_ops.applies_adapters_to_base_tokens(cpu_lora_ops.bgmv_shrink)


def test_importing_it_replaces_the_ops_where_vllm_looks_them_up():
    for name in ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice"):
        assert getattr(lora_ops, name) is getattr(cpu_lora_ops, name)
        assert getattr(punica_cpu, name) is getattr(cpu_lora_ops, name)
    assert not cpu_lora_ops.install(), "installing twice changes nothing"


def test_shrink():
    inputs, weights = random(4, 6), random(3, 1, 2, 6)
    ours, theirs = torch.zeros(4, 2), torch.zeros(4, 2)
    cpu_lora_ops.bgmv_shrink(inputs, weights, ours, INDICES, 0.5)
    vllm_shrink(inputs, weights, theirs, INDICES, 0.5)
    adapted = INDICES >= 0
    assert torch.equal(ours[adapted], theirs[adapted])
    assert not ours[BASE].any() and theirs[BASE].any()


@pytest.mark.parametrize("add_inputs", [True, False])
def test_expand(add_inputs):
    inputs, weights, start = random(4, 2), random(3, 1, 5, 2), random(4, 5)
    ours, theirs = start.clone(), start.clone()
    cpu_lora_ops.bgmv_expand(inputs, weights, ours, INDICES, add_inputs)
    vllm_expand(inputs, weights, theirs, INDICES, add_inputs)
    adapted = INDICES >= 0
    assert torch.equal(ours[adapted], theirs[adapted])
    assert torch.equal(ours[BASE], start[BASE] if add_inputs else torch.zeros(5))


def test_expand_slice():
    inputs, weights, start = random(4, 2), random(3, 1, 3, 2), random(4, 8)
    ours, theirs = start.clone(), start.clone()
    cpu_lora_ops.bgmv_expand_slice(inputs, weights, ours, INDICES, 4, 3)
    vllm_expand_slice(inputs, weights, theirs, INDICES, 4, 3)
    adapted = INDICES >= 0
    assert torch.equal(ours[adapted], theirs[adapted])
    assert torch.equal(ours[BASE], start[BASE])


def test_the_worker_loads_the_fix_on_a_cpu_with_lora_only():
    assert resolve_obj_by_qualname(CPU_LORA_EXTENSION) is cpu_lora_ops.SkipBaseTokensInCpuLoraOps
    lora = AsyncEngineArgs(model="m", enable_lora=True)
    assert with_cpu_lora_fix(lora, on_cpu=True).worker_extension_cls == CPU_LORA_EXTENSION
    assert with_cpu_lora_fix(AsyncEngineArgs(model="m", enable_lora=True),
                             on_cpu=False).worker_extension_cls == ""
    assert with_cpu_lora_fix(AsyncEngineArgs(model="m"), on_cpu=True).worker_extension_cls == ""
    with pytest.raises(SettingsError, match="worker_extension_cls: 'my.Ext'; with enable_lora"):
        with_cpu_lora_fix(AsyncEngineArgs(model="m", enable_lora=True,
                                          worker_extension_cls="my.Ext"), on_cpu=True)
