"""Reading the model config's ``parameters``: Triton keeps each as ``{"string_value": ...}``."""

from __future__ import annotations

from typing import Any


def parameter_text(model_config: dict[str, Any], key: str) -> str | None:
    """The parameter's value with surrounding blanks removed; None when absent or blank."""
    value = (model_config.get("parameters") or {}).get(key)
    if value is None:
        return None
    text = str(value.get("string_value", "")).strip()
    return text or None
