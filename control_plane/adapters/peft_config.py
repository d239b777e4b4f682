"""What registration reads of an adapter directory: its ``adapter_config.json`` (PEFT's layout),
never its weights."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from control_plane.errors import InvalidAdapter, InvalidSource

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"


@dataclass(frozen=True)
class AdapterConfig:
    rank: int
    target_modules: list[str]
    base_model: str


def read_adapter_config(directory: Path) -> AdapterConfig:
    """The rank, target modules and base model of the PEFT adapter in ``directory``."""
    if not directory.is_dir():
        raise InvalidSource(f"adapter source '{directory}' is not a directory; give the "
                            f"directory that holds {CONFIG_FILE} and {WEIGHTS_FILE}")
    missing = [name for name in (CONFIG_FILE, WEIGHTS_FILE) if not (directory / name).is_file()]
    if missing:
        raise InvalidSource(f"adapter source '{directory}' has no {' and no '.join(missing)}: "
                            "a PEFT LoRA adapter directory holds both (save it with "
                            "peft's save_pretrained)")
    try:
        config = json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidAdapter(f"{directory / CONFIG_FILE} cannot be read as JSON: {exc}") from None
    if not isinstance(config, dict):
        raise InvalidAdapter(f"{directory / CONFIG_FILE} is not a JSON object")
    return AdapterConfig(rank=_rank(config, directory), target_modules=_targets(config, directory),
                         base_model=_base_model(config, directory))


def _rank(config: dict[str, Any], directory: Path) -> int:
    rank = config.get("r")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise InvalidAdapter(f"{directory / CONFIG_FILE}: 'r' (the LoRA rank) must be a "
                             f"positive integer, not {rank!r}")
    return rank


def _targets(config: dict[str, Any], directory: Path) -> list[str]:
    targets = config.get("target_modules")
    # PEFT takes a list of module names, or one string (a regular expression, "all-linear").
    if isinstance(targets, str) and targets:
        return [targets]
    if isinstance(targets, list) and targets and all(isinstance(t, str) for t in targets):
        return sorted(targets)
    raise InvalidAdapter(f"{directory / CONFIG_FILE}: 'target_modules' must name the modules "
                         f"the adapter changes (a list of names, or one string), not {targets!r}")


def _base_model(config: dict[str, Any], directory: Path) -> str:
    base = config.get("base_model_name_or_path")
    if not isinstance(base, str) or not base.strip("/ "):
        raise InvalidAdapter(f"{directory / CONFIG_FILE} names no 'base_model_name_or_path'; set "
                             "it to the base model the adapter was trained on, so the control "
                             "plane can check it against the version's model")
    return base
