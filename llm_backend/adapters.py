"""LoRA adapters in a running engine: which adapter files may be loaded, and which are loaded.

vLLM checks an adapter in its worker process, and a refusal there (a rank over ``max_lora_rank``,
a module the model lacks) kills the engine with it (``EngineDeadError``). So every check runs here,
in the backend's process, before vLLM sees the adapter: ``adapter_config.json`` through vLLM's own
``PEFTHelper``, ``adapter_model.safetensors`` by its header only (names, shapes and dtypes; no
weights are read), compared with the model's Hugging Face config. Nothing here needs an engine.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open
from vllm.config.lora import LoRAConfig
from vllm.lora.peft_helper import PEFTHelper
from vllm.lora.request import LoRARequest
from vllm.lora.utils import parse_fine_tuned_lora_name

from llm_backend.errors import InvalidRequest
from llm_backend.settings import SettingsError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# Architectures whose decoder layers are Llama's: model.layers.<i>.self_attn.{q,k,v,o}_proj and
# model.layers.<i>.mlp.{gate,up,down}_proj, with no renaming between PEFT's names and vLLM's.
LLAMA_LAYOUT = frozenset({
    "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
})
_LAYER_MODULE = re.compile(r"model\.layers\.(\d+)\.(\w+\.\w+)")
_FLOAT_DTYPES = frozenset({"F16", "BF16", "F32"})
# A refusal lists this many of an adapter's problems, then counts the rest.
MAX_LISTED_PROBLEMS = 3


class AdapterRefused(InvalidRequest):
    """An adapter that cannot be loaded (or unloaded) as asked; the message says why."""

    def __init__(self, problem: str, field: str = "adapter_path") -> None:
        super().__init__(field, problem)


@dataclass(frozen=True)
class LoraTargets:
    """The modules of a model an adapter may target, with their (in, out) features."""

    architecture: str
    num_layers: int
    # "self_attn.q_proj" -> (in_features, out_features)
    modules: Mapping[str, tuple[int, int]]
    max_position_embeddings: int | None = None

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> LoraTargets:
        """From the Hugging Face config vLLM holds; refuses an architecture of unknown layout."""
        text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
        architectures = list(getattr(hf_config, "architectures", None) or [])
        known = [name for name in architectures if name in LLAMA_LAYOUT]
        if not known:
            raise SettingsError(
                f"enable_lora: the backend checks adapters against the Llama decoder layout "
                f"({', '.join(sorted(LLAMA_LAYOUT))}) before vLLM loads them, and this model is "
                f"{', '.join(architectures) or 'of no declared architecture'}; serve it without "
                "enable_lora")
        hidden = int(text.hidden_size)
        heads = int(text.num_attention_heads)
        kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(text, "head_dim", None) or hidden // heads)
        intermediate = int(text.intermediate_size)
        return cls(
            architecture=known[0],
            num_layers=int(text.num_hidden_layers),
            modules={
                "self_attn.q_proj": (hidden, heads * head_dim),
                "self_attn.k_proj": (hidden, kv_heads * head_dim),
                "self_attn.v_proj": (hidden, kv_heads * head_dim),
                "self_attn.o_proj": (heads * head_dim, hidden),
                "mlp.gate_proj": (hidden, intermediate),
                "mlp.up_proj": (hidden, intermediate),
                "mlp.down_proj": (intermediate, hidden),
            },
            max_position_embeddings=getattr(text, "max_position_embeddings", None),
        )

    @property
    def leaf_names(self) -> list[str]:
        return [module.rsplit(".", 1)[-1] for module in self.modules]


@dataclass(frozen=True)
class AdapterFiles:
    """An adapter directory that passed every check."""

    path: str
    rank: int


def check_adapter_name(name: Any) -> str:
    if not isinstance(name, str) or not ADAPTER_NAME.fullmatch(name):
        raise AdapterRefused(f"must be 1-64 characters from A-Z, a-z, 0-9, '_', '.' and '-', "
                             f"got {name!r}", field="adapter_name")
    return name


def inspect_adapter(path: Any, targets: LoraTargets, lora_config: LoRAConfig) -> AdapterFiles:
    """Check a PEFT LoRA adapter directory against the model and the engine's LoRA limits.

    Refuses (``AdapterRefused``) whatever vLLM's worker would refuse, and tensors whose shapes do
    not fit the model, which vLLM would only find while running a request.
    """
    directory = _adapter_directory(path)
    try:
        config = json.loads((directory / ADAPTER_CONFIG).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterRefused(f"{directory / ADAPTER_CONFIG} is not readable JSON ({exc})") from None
    if not isinstance(config, dict):
        raise AdapterRefused(f"{directory / ADAPTER_CONFIG} is not a JSON object")
    peft_type = config.get("peft_type", "LORA")
    if peft_type != "LORA":
        raise AdapterRefused(f"{directory} is a {peft_type} adapter; only LoRA adapters load")
    try:
        peft = PEFTHelper.from_local_dir(str(directory), targets.max_position_embeddings)
        peft.validate_legal(lora_config)
    except (ValueError, TypeError) as exc:
        raise AdapterRefused(f"{directory}: {exc}") from None
    if peft.modules_to_save:
        raise AdapterRefused(f"{directory}: modules_to_save {peft.modules_to_save} replaces "
                             "whole modules of the model, which a generative model's adapters "
                             "may not do")
    problems = _target_module_problems(peft.target_modules, targets)
    problems += _tensor_problems(directory / ADAPTER_WEIGHTS, peft, targets)
    if problems:
        listed = "; ".join(problems[:MAX_LISTED_PROBLEMS])
        more = len(problems) - MAX_LISTED_PROBLEMS
        raise AdapterRefused(f"{directory} does not fit model {targets.architecture}: {listed}"
                             + (f" (and {more} more)" if more > 0 else ""))
    return AdapterFiles(str(directory), peft.r)


def _adapter_directory(path: Any) -> Path:
    if not isinstance(path, str) or not path:
        raise AdapterRefused(f"must be the adapter's directory on the node, got {path!r}")
    directory = Path(path)
    # Relative to what? tritonserver's working directory is nothing the caller knows.
    if not directory.is_absolute():
        raise AdapterRefused(f"{path!r} must be an absolute path on the node")
    if not directory.is_dir():
        raise AdapterRefused(f"{path} is not a directory on the node")
    missing = [name for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS)
               if not (directory / name).is_file()]
    if missing:
        raise AdapterRefused(f"{path} has no {' and no '.join(missing)} (a PEFT LoRA adapter "
                             f"directory holds {ADAPTER_CONFIG} and {ADAPTER_WEIGHTS})")
    return directory


def _target_module_problems(target_modules: list[str] | str, targets: LoraTargets) -> list[str]:
    # A string is a regular expression over module names (PEFT): the tensors say what it hit.
    if isinstance(target_modules, str):
        return []
    leaves = targets.leaf_names
    return [f"target module {module!r} is not one the model takes LoRA on ({', '.join(leaves)})"
            for module in target_modules if module.rsplit(".", 1)[-1] not in leaves]


def _tensor_problems(weights: Path, peft: PEFTHelper, targets: LoraTargets) -> list[str]:
    problems: list[str] = []
    halves: dict[str, set[str]] = {}
    try:
        with safe_open(str(weights), framework="pt") as tensors:
            for key in tensors.keys():  # noqa: SIM118 - a safe_open handle is not a dict
                piece = tensors.get_slice(key)
                problem = _tensor_problem(key, list(piece.get_shape()), piece.get_dtype(), peft,
                                          targets, halves)
                if problem:
                    problems.append(problem)
    except (SafetensorError, OSError) as exc:
        return [f"{weights.name} is not a readable safetensors file ({exc})"]
    if not halves and not problems:
        return [f"{weights.name} holds no LoRA weights"]
    problems += [f"module {module} has lora_{'A' if 'lora_B' in seen else 'B'} missing"
                 for module, seen in halves.items() if len(seen) != 2]
    return problems


def _tensor_problem(key: str, shape: list[int], dtype: str, peft: PEFTHelper,
                    targets: LoraTargets, halves: dict[str, set[str]]) -> str | None:
    """What is wrong with one tensor of the adapter, or None."""
    try:
        module, is_a = parse_fine_tuned_lora_name(key)
    except ValueError:
        return f"tensor {key} is not a LoRA weight (lora_A / lora_B)"
    if not key.endswith((".lora_A.weight", ".lora_B.weight")):
        return f"tensor {key}: embedding and classifier adapters are not supported"
    match = _LAYER_MODULE.fullmatch(module)
    if match is None or match.group(2) not in targets.modules:
        return f"tensor {key}: {module} is not a module the model takes LoRA on"
    if int(match.group(1)) >= targets.num_layers:
        return f"tensor {key}: the model has {targets.num_layers} layers"
    if dtype not in _FLOAT_DTYPES:
        return f"tensor {key} is {dtype}, not a floating-point type ({', '.join(_FLOAT_DTYPES)})"
    halves.setdefault(module, set()).add("lora_A" if is_a else "lora_B")
    rank, _ = peft.get_rank_and_scaling(module)
    in_features, out_features = targets.modules[match.group(2)]
    expected = [rank, in_features] if is_a else [out_features, rank]
    if shape != expected:
        return f"tensor {key} has shape {shape}; the model needs {expected} (rank {rank})"
    return None


class AdapterState(Enum):
    LOADED = "loaded"
    # New requests are refused; it leaves the engine once its requests finish.
    UNLOADING = "unloading"


@dataclass
class LoadedAdapter:
    name: str
    path: str
    rank: int
    lora: LoRARequest
    state: AdapterState = AdapterState.LOADED
    requests_in_flight: int = 0


@dataclass(frozen=True)
class AdapterLimits:
    """The engine's LoRA limits (``vllm_config.lora_config``)."""

    max_loras: int
    max_lora_rank: int
    # Adapters the engine may hold at once: vLLM's max_cpu_loras, which defaults to max_loras.
    max_adapters: int

    @classmethod
    def from_lora_config(cls, lora_config: LoRAConfig) -> AdapterLimits:
        return cls(int(lora_config.max_loras), int(lora_config.max_lora_rank),
                   int(lora_config.max_cpu_loras or lora_config.max_loras))


@dataclass
class AdapterRegistry:
    """The adapters loaded into one engine and the requests using each.

    The engine's loop thread changes it; ``execute()`` reads it (a request's ``lora_name``), so
    every access holds a lock. Loads are serialized by the caller: between ``plan_load`` and
    ``register`` no other load may start, or both could pass the limit.
    """

    limits: AdapterLimits
    _adapters: dict[str, LoadedAdapter] = field(default_factory=dict)
    _next_id: int = 1
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def plan_load(self, name: str, path: str) -> LoadedAdapter | None:
        """The adapter already loaded as asked (nothing to do), or None: load it.

        Refuses a name loaded from another path, one being unloaded, and one too many.
        """
        with self._lock:
            loaded = self._adapters.get(name)
            if loaded is not None:
                if loaded.state is AdapterState.UNLOADING:
                    raise AdapterRefused(f"{name!r} is being unloaded; load it again once the "
                                         "unload has finished", field="adapter_name")
                if loaded.path != path:
                    raise AdapterRefused(f"{name!r} is loaded from {loaded.path}; unload it "
                                         "first", field="adapter_name")
                return loaded
            if len(self._adapters) >= self.limits.max_adapters:
                raise AdapterRefused(
                    f"the model holds {len(self._adapters)} adapters "
                    f"({', '.join(self._adapters)}), its limit (engine arg max_cpu_loras, which "
                    f"defaults to max_loras); unload one first", field="adapter_name")
            return None

    def new_adapter(self, name: str, files: AdapterFiles) -> LoadedAdapter:
        """An adapter with an id of its own, for the engine to load; ``register`` it after."""
        with self._lock:
            lora_id, self._next_id = self._next_id, self._next_id + 1
        return LoadedAdapter(name, files.path, files.rank, LoRARequest(name, lora_id, files.path))

    def register(self, adapter: LoadedAdapter) -> None:
        """Record an adapter the engine has loaded."""
        with self._lock:
            self._adapters[adapter.name] = adapter

    def lookup(self, name: str) -> LoadedAdapter:
        """The loaded adapter a request names; refuses an unknown one, listing the loaded."""
        with self._lock:
            adapter = self._adapters.get(name)
            if adapter is None or adapter.state is not AdapterState.LOADED:
                loaded = [a.name for a in self._adapters.values()
                          if a.state is AdapterState.LOADED]
                was = "is being unloaded" if adapter is not None else "is not loaded"
                raise InvalidRequest(
                    "sampling_parameters.lora_name",
                    f"adapter {name!r} {was}; loaded: {', '.join(loaded) or 'none'}")
            return adapter

    def acquire(self, adapter: LoadedAdapter) -> None:
        """Count a request that starts with ``adapter``; refuses one unloaded meanwhile."""
        with self._lock:
            if self._adapters.get(adapter.name) is not adapter or \
                    adapter.state is not AdapterState.LOADED:
                raise InvalidRequest("sampling_parameters.lora_name",
                                     f"adapter {adapter.name!r} was unloaded while the request "
                                     "waited")
            adapter.requests_in_flight += 1

    def release(self, adapter: LoadedAdapter) -> None:
        with self._lock:
            adapter.requests_in_flight -= 1

    def begin_unload(self, name: str) -> LoadedAdapter | None:
        """Refuse new requests for ``name``; None when it is not loaded (nothing to do)."""
        with self._lock:
            adapter = self._adapters.get(name)
            if adapter is not None:
                adapter.state = AdapterState.UNLOADING
            return adapter

    def remove(self, adapter: LoadedAdapter) -> bool:
        """Forget ``adapter``; False when another unload already did."""
        with self._lock:
            if self._adapters.get(adapter.name) is not adapter:
                return False
            del self._adapters[adapter.name]
            return True

    def snapshot(self) -> list[LoadedAdapter]:
        """Copies of the loaded adapters (those being unloaded too), by name."""
        with self._lock:
            return [LoadedAdapter(a.name, a.path, a.rank, a.lora, a.state, a.requests_in_flight)
                    for _, a in sorted(self._adapters.items())]
