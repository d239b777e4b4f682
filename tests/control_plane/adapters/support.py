"""Helpers of the adapter tests: adapter directories written by hand (PEFT's layout), and
deployments stored as the actuator leaves them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from control_plane.adapters.orm import DeploymentAdapter
from control_plane.db import transaction
from control_plane.deployments.orm import Deployment

BASE_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
# A hub source whose repository is the adapters' base model.
VERSION_SOURCE = "hf://HuggingFaceTB/SmolLM2-135M-Instruct"
LORA_ARGS = {"enable_lora": True, "max_loras": 2, "max_lora_rank": 16}


def write_adapter(directory: Path, *, base_model: str = BASE_MODEL, rank: int = 8,
                  target_modules: Sequence[str] | str = ("q_proj", "v_proj"),
                  config: dict[str, Any] | None = None, weights: bool = True) -> Path:
    """A PEFT LoRA adapter directory: its adapter_config.json, and weights that registration
    never reads."""
    directory.mkdir(parents=True, exist_ok=True)
    document = config if config is not None else {
        "peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank,
        "target_modules": target_modules if isinstance(target_modules, str)
        else list(target_modules),
        "base_model_name_or_path": base_model, "bias": "none", "task_type": "CAUSAL_LM"}
    (directory / "adapter_config.json").write_text(json.dumps(document))
    if weights:
        (directory / "adapter_model.safetensors").write_bytes(b"\0" * 32)
    return directory


def set_deployment(factory: sessionmaker[Session], deployment_id: int, **fields: Any) -> None:
    with transaction(factory) as session:
        session.execute(update(Deployment).where(Deployment.id == deployment_id).values(**fields))


def set_adapter_state(factory: sessionmaker[Session], deployment_id: int, state: str) -> None:
    """Every adapter wanted on the deployment in ``state``, as an operation would leave it."""
    with transaction(factory) as session:
        session.execute(update(DeploymentAdapter)
                        .where(DeploymentAdapter.deployment_id == deployment_id)
                        .values(state=state, error=None))
