"""The Triton model name a deployed alias is served under.

``production`` is served under the model's own name, so clients that call model ``M`` without a
version reach the production version. Any other alias ``A`` is served as ``M.A``: model and alias
names cannot contain a dot, so the name is never ambiguous.
"""

from __future__ import annotations

PRODUCTION = "production"


def triton_model_name(model: str, alias: str) -> str:
    return model if alias == PRODUCTION else f"{model}.{alias}"
