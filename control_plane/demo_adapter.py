"""Make a LoRA adapter for the demo model with random weights, in PEFT's file layout.

For tests, benchmarks and demos of run-time adapters: no training and no ``peft`` needed. Its
weights are noise, large enough that greedy answers differ from the base model's; PEFT would
start ``lora_B`` at zero (an adapter that changes nothing).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from control_plane.demo_model import MODEL_DIR, MODEL_NAME

# Where each module PEFT may target sits in a Llama decoder layer, and its (in, out) features as
# functions of the model's config.
_Features = Callable[[dict[str, int]], tuple[int, int]]
_MODULES: dict[str, tuple[str, _Features]] = {
    "q_proj": ("self_attn", lambda c: (c["hidden_size"], c["num_attention_heads"] * _head(c))),
    "k_proj": ("self_attn", lambda c: (c["hidden_size"], c["num_key_value_heads"] * _head(c))),
    "v_proj": ("self_attn", lambda c: (c["hidden_size"], c["num_key_value_heads"] * _head(c))),
    "o_proj": ("self_attn", lambda c: (c["num_attention_heads"] * _head(c), c["hidden_size"])),
    "gate_proj": ("mlp", lambda c: (c["hidden_size"], c["intermediate_size"])),
    "up_proj": ("mlp", lambda c: (c["hidden_size"], c["intermediate_size"])),
    "down_proj": ("mlp", lambda c: (c["intermediate_size"], c["hidden_size"])),
}


def _head(config: dict[str, int]) -> int:
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def make_random_adapter(directory: Path, rank: int, seed: int,
                        target_modules: Sequence[str] = ("q_proj", "v_proj"),
                        model_dir: Path = MODEL_DIR, scale: float = 0.05) -> Path:
    """Write ``adapter_config.json`` and ``adapter_model.safetensors`` into ``directory``."""
    import torch
    from safetensors.torch import save_file

    unknown = [module for module in target_modules if module not in _MODULES]
    if unknown:
        raise ValueError(f"target modules {unknown} are not Llama's ({', '.join(_MODULES)})")
    config = json.loads((model_dir / "config.json").read_text())
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for module in target_modules:
            block, features = _MODULES[module]
            in_features, out_features = features(config)
            prefix = f"base_model.model.model.layers.{layer}.{block}.{module}"
            for half, shape in (("lora_A", (rank, in_features)), ("lora_B", (out_features, rank))):
                weight = torch.randn(*shape, generator=generator) * scale
                tensors[f"{prefix}.{half}.weight"] = weight.to(torch.bfloat16)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "adapter_model.safetensors"))
    (directory / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": MODEL_NAME,
        "r": rank, "lora_alpha": 2 * rank, "lora_dropout": 0.0, "bias": "none",
        "fan_in_fan_out": False, "target_modules": list(target_modules),
    }, indent=2))
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target-modules", nargs="+", default=["q_proj", "v_proj"])
    args = parser.parse_args()
    path = make_random_adapter(args.directory, args.rank, args.seed, args.target_modules)
    print(f"adapter: {path}")


if __name__ == "__main__":
    main()
