"""Whether an adapter fits a version: the version's engine can serve LoRA, the adapter was made
for its base model, and its rank is within the engine's limit. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from control_plane.adapters.peft_config import AdapterConfig
from control_plane.errors import InvalidAdapter

# vLLM's EngineArgs.max_lora_rank when a version does not set it.
DEFAULT_MAX_LORA_RANK = 16
LORA_ARGS_HINT = ("set enable_lora, max_loras and max_lora_rank in the version's engine_args "
                  "(versions are immutable: register a new version with them)")


def last_component(name: str) -> str:
    """``org/Model-Name`` → ``model-name``: what two spellings of one model have in common."""
    return name.rstrip("/").rsplit("/", 1)[-1].lower()


def source_model_name(source: str) -> str:
    """The model's own name in a version's source: the directory, or the hub repository."""
    if source.startswith("hf://"):
        source = source.split("@", 1)[0]
    return last_component(source)


def check_serves_lora(version_label: str, engine_args: Mapping[str, Any]) -> None:
    """Refuse a version whose engine starts without LoRA support."""
    if engine_args.get("enable_lora") is not True:
        raise InvalidAdapter(f"{version_label} does not serve LoRA adapters (its engine_args do "
                             f"not set enable_lora: true); {LORA_ARGS_HINT}")


def check_fits_version(config: AdapterConfig, version_label: str, source: str,
                       engine_args: Mapping[str, Any]) -> None:
    """Refuse, with what was compared, an adapter made for another base model or of too high a
    rank for the version's engine."""
    served_names = _served_names(engine_args.get("served_model_name"))
    candidates = {source_model_name(source), *(last_component(name) for name in served_names)}
    base = last_component(config.base_model)
    if base not in candidates:
        compared = " or ".join(f"'{name}'" for name in sorted(candidates))
        raise InvalidAdapter(
            f"the adapter was made for base model '{config.base_model}', and {version_label} "
            f"serves another one: compared the last path component, case-insensitively, '{base}' "
            f"with {compared} (from the version's source '{source}'"
            f"{' and served_model_name' if served_names else ''}); register it under a version "
            "of its own base model")
    limit = engine_args.get("max_lora_rank", DEFAULT_MAX_LORA_RANK)
    if isinstance(limit, int) and config.rank > limit:
        where = "its engine_args" if "max_lora_rank" in engine_args else \
            "vLLM's default: its engine_args do not set it"
        raise InvalidAdapter(f"the adapter's rank {config.rank} is over the max_lora_rank "
                             f"{limit} of {version_label} ({where}); register a version with "
                             f"max_lora_rank >= {config.rank}, or use an adapter of rank <= "
                             f"{limit}")


def _served_names(served: Any) -> list[str]:
    # vLLM takes one name or a list of names.
    if isinstance(served, str):
        return [served]
    if isinstance(served, list):
        return [name for name in served if isinstance(name, str)]
    return []
