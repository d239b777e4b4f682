"""Control requests: load, unload and list a model's LoRA adapters through ordinary requests.

A request whose parameters carry ``adapter_control`` is a control request, whatever else it holds;
its tensors are not read (``text_input`` is sent empty because the model config requires it). The
control plane sends them with the node's repository key: loading an adapter changes what every
request naming it gets, so only the holder of the key that already guards loading models may. The
answer is one response whose ``text_output`` is the adapters' state after the action, as JSON.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import PurePosixPath
from typing import Any

from llm_backend.adapters import AdapterLimits, LoadedAdapter, check_adapter_name
from llm_backend.errors import InvalidRequest

ADAPTER_CONTROL_PARAMETER = "adapter_control"
REPOSITORY_KEY_PARAMETER = "repository_key"
ADAPTER_NAME_PARAMETER = "adapter_name"
ADAPTER_PATH_PARAMETER = "adapter_path"
# The key of the node's model-repository API (tritonserver's restricted API), which the node's
# launcher puts in tritonserver's environment.
REPOSITORY_KEY_ENV = "LLM_REPOSITORY_KEY"


class AdapterAction(Enum):
    LOAD = "load"
    UNLOAD = "unload"
    LIST = "list"


@dataclass(frozen=True)
class AdapterControl:
    """A control request that passed authorisation; ``name`` for load and unload, ``path`` for
    load (checked on the engine's loop, off ``execute()``)."""

    action: AdapterAction
    name: str | None = None
    path: str | None = None


def is_control_request(parameters: Mapping[str, Any]) -> bool:
    return ADAPTER_CONTROL_PARAMETER in parameters


@dataclass(frozen=True)
class ControlKey:
    """The node's repository key; None: the node refuses every control request."""

    key: str | None = field(default=None, repr=False)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> ControlKey:
        return cls(environ.get(REPOSITORY_KEY_ENV) or None)

    def authorize(self, parameters: Mapping[str, Any]) -> None:
        """Refuse a control request without the node's key; messages never contain a key."""
        if self.key is None:
            raise InvalidRequest(ADAPTER_CONTROL_PARAMETER,
                                 f"adapter control needs {REPOSITORY_KEY_ENV} on the node: the "
                                 "key of its model-repository API")
        sent = parameters.get(REPOSITORY_KEY_PARAMETER)
        if not isinstance(sent, str) or not hmac.compare_digest(sent.encode(), self.key.encode()):
            raise InvalidRequest(REPOSITORY_KEY_PARAMETER, "refused")


def parse_control(parameters: Mapping[str, Any], key: ControlKey) -> AdapterControl:
    """The control request ``parameters`` make, once ``key`` authorises it."""
    key.authorize(parameters)
    raw = parameters[ADAPTER_CONTROL_PARAMETER]
    try:
        action = AdapterAction(raw)
    except ValueError:
        raise InvalidRequest(ADAPTER_CONTROL_PARAMETER,
                             f"must be one of {', '.join(a.value for a in AdapterAction)}, "
                             f"got {raw!r}") from None
    if action is AdapterAction.LIST:
        return AdapterControl(action)
    name = check_adapter_name(parameters.get(ADAPTER_NAME_PARAMETER))
    if action is AdapterAction.UNLOAD:
        return AdapterControl(action, name)
    path = parameters.get(ADAPTER_PATH_PARAMETER)
    if not isinstance(path, str) or not path:
        raise InvalidRequest(ADAPTER_PATH_PARAMETER,
                             f"load needs the adapter's directory on the node, got {path!r}")
    # As the registry compares paths: "/a/b/" and "/a//b" are "/a/b".
    return AdapterControl(action, name, str(PurePosixPath(path)))


def state_json(adapters: Sequence[LoadedAdapter], limits: AdapterLimits) -> str:
    """The answer to every control request: the adapters loaded after its action."""
    return json.dumps({
        "adapters": [{"name": a.name, "path": a.path, "rank": a.rank,
                      "requests_in_flight": a.requests_in_flight} for a in adapters],
        "max_loras": limits.max_loras,
        "max_lora_rank": limits.max_lora_rank,
        "max_adapters": limits.max_adapters,
    })
