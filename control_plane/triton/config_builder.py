"""A version's Triton model config, built as protobuf ``ModelConfig`` from its serving settings and
overrides, and checked the way Triton and our backend will check it at load.

Layers, later ones winning: the backend's fixed interface (backend, decoupled, the stock vLLM
tensors), the serving settings (our ``parameters``), then the version's own overrides for
everything else. The fields the first two own cannot be overridden: the interface is what clients
and the backend depend on, and the serving settings have one place to be set.

Priority levels and queue policies are ``parameters`` the backend's own queue enforces, never
``dynamic_batching`` fields: Triton turns payload prefetching off for a batcher with priority
levels or a restrictive queue policy, and requests then stall ~500 ms in its timed wait. So
``dynamic_batching`` stays empty, and an override may only add what keeps prefetching on.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor
from tritonclient.grpc import model_config_pb2

from control_plane.errors import InvalidTritonConfig
from control_plane.placement.model import Device, Placement
from control_plane.registry.serving import QueuePolicy, ServingSettings
from control_plane.triton.specs import VersionSpec
from llm_backend.queue_config import (
    DEFAULT_PRIORITY_LEVEL,
    DEFAULT_QUEUE_POLICY,
    LEVEL_QUEUE_POLICY_PREFIX,
    PRIORITY_LEVELS,
    level_policy_key,
)
from llm_backend.settings import SettingsError, settings_from

BACKEND = "llm_vllm"
_TYPES = model_config_pb2.DataType

# (name, type, optional): the tensor interface of Triton's stock vLLM backend, which ours keeps.
_INPUTS = [
    ("text_input", _TYPES.TYPE_STRING, False),
    ("stream", _TYPES.TYPE_BOOL, True),
    ("sampling_parameters", _TYPES.TYPE_STRING, True),
    ("exclude_input_in_output", _TYPES.TYPE_BOOL, True),
    ("return_finish_reason", _TYPES.TYPE_BOOL, True),
    ("return_num_input_tokens", _TYPES.TYPE_BOOL, True),
    ("return_num_output_tokens", _TYPES.TYPE_BOOL, True),
    ("return_logprobs", _TYPES.TYPE_BOOL, True),
    ("return_cumulative_logprob", _TYPES.TYPE_BOOL, True),
]
_OUTPUTS = [
    ("text_output", _TYPES.TYPE_STRING),
    ("finish_reason", _TYPES.TYPE_STRING),
    ("num_input_tokens", _TYPES.TYPE_UINT32),
    ("num_output_tokens", _TYPES.TYPE_UINT32),
    ("cumulative_logprob", _TYPES.TYPE_FP32),
    ("logprobs", _TYPES.TYPE_STRING),
    # Ours: in the first response when sampling_parameters.prompt_logprobs is set.
    ("prompt_logprobs", _TYPES.TYPE_STRING),
]

# Top-level fields an override may not touch, and what to do instead.
_OWNED_FIELDS = {
    "name": "the Triton model name comes from the model and deployment",
    "platform": f"the backend is always {BACKEND}",
    "backend": f"the backend is always {BACKEND}",
    "runtime": f"the backend is always {BACKEND}",
    "input": "the tensor interface is fixed (Triton's stock vLLM interface)",
    "output": "the tensor interface is fixed (Triton's stock vLLM interface)",
    "max_batch_size": "the backend batches inside vLLM; Triton's max_batch_size stays 0",
    "model_transaction_policy": "the backend streams, so the model is always decoupled",
    "instance_group": "placement assigns instance groups when a version is deployed",
    "sequence_batching": "an LLM version uses Triton's dynamic batcher, and the backend's own "
                         "queue orders requests by priority level",
    "ensemble_scheduling": "an LLM version uses Triton's dynamic batcher, and the backend's own "
                           "queue orders requests by priority level",
}
# dynamic_batching fields that turn Triton's payload prefetching off, and the serving field the
# backend's queue enforces instead.
_PREFETCH_OFF_BATCHING_FIELDS = {
    "priority_levels": "serving.priority_levels",
    "default_priority_level": "serving.default_priority_level",
    "default_queue_policy": "serving.default_queue_policy",
    "priority_queue_policy": "serving.priority_queue_policies",
}
# parameters keys the serving settings write.
_OWNED_PARAMETERS = {
    PRIORITY_LEVELS: "serving.priority_levels",
    DEFAULT_PRIORITY_LEVEL: "serving.default_priority_level",
    DEFAULT_QUEUE_POLICY: "serving.default_queue_policy",
    "max_inflight_requests": "serving.max_inflight_requests",
    "reserved_urgent_slots": "serving.reserved_urgent_slots",
    "urgent_priority_level": "serving.urgent_priority_level",
    "drain_timeout_seconds": "serving.drain_timeout_seconds",
}
# parameters every version starts with, as the shipped config has them; an override may change
# them. REPORT_CUSTOM_METRICS: the stock vLLM backend's vllm:* metric families, for its dashboards.
# fair_share_preemption: a tenant with nothing running may pause another tenant's request.
_DEFAULT_PARAMETERS = {"REPORT_CUSTOM_METRICS": "true", "fair_share_preemption": "true"}


def interface() -> model_config_pb2.ModelConfig:
    """What every LLM version has: our backend, decoupled, the stock vLLM tensors."""
    config = model_config_pb2.ModelConfig(backend=BACKEND, max_batch_size=0)
    config.model_transaction_policy.decoupled = True
    for name, data_type, optional in _INPUTS:
        config.input.add(name=name, data_type=data_type, dims=[1], optional=optional)
    for name, data_type in _OUTPUTS:
        config.output.add(name=name, data_type=data_type, dims=[-1])
    config.instance_group.add(count=1, kind=model_config_pb2.ModelInstanceGroup.KIND_MODEL)
    return config


def _policy_text(policy: QueuePolicy) -> str:
    # The field names of Triton's ModelQueuePolicy JSON form, which the backend reads.
    return json.dumps(policy.model_dump(mode="json"), separators=(",", ":"))


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def apply_serving(config: model_config_pb2.ModelConfig, serving: ServingSettings) -> None:
    """Write the serving settings as ``parameters``; ``dynamic_batching`` is present and empty."""
    config.dynamic_batching.SetInParent()
    parameters = {
        PRIORITY_LEVELS: str(serving.priority_levels),
        DEFAULT_PRIORITY_LEVEL: str(serving.effective_default_level),
        DEFAULT_QUEUE_POLICY: _policy_text(serving.default_queue_policy),
        **{level_policy_key(level): _policy_text(policy)
           for level, policy in sorted(serving.priority_queue_policies.items())},
        "max_inflight_requests": "" if serving.max_inflight_requests is None
        else str(serving.max_inflight_requests),
        "reserved_urgent_slots": str(serving.reserved_urgent_slots),
        "urgent_priority_level": str(serving.urgent_priority_level),
        "drain_timeout_seconds": _number_text(serving.drain_timeout_seconds),
    }
    for key, value in parameters.items():
        config.parameters[key].string_value = value


def parse_overrides(overrides: Mapping[str, Any]) -> model_config_pb2.ModelConfig:
    """Overrides (ModelConfig's JSON form) as a message; every problem is named at once."""
    problems = []
    top = _by_proto_name(overrides, model_config_pb2.ModelConfig.DESCRIPTOR)
    for key in sorted(top):
        if key in _OWNED_FIELDS:
            problems.append(f"'{key}' cannot be overridden: {_OWNED_FIELDS[key]}")
    batching = top.get("dynamic_batching")
    if isinstance(batching, Mapping):
        batching = _by_proto_name(batching, model_config_pb2.ModelDynamicBatching.DESCRIPTOR)
        problems += [f"'dynamic_batching.{key}' turns off Triton's payload prefetching "
                     f"(requests then stall ~500 ms): set {owner} instead, which the backend's "
                     "queue enforces"
                     for key, owner in _PREFETCH_OFF_BATCHING_FIELDS.items() if key in batching]
        if batching.get("preferred_batch_size"):
            problems.append("'dynamic_batching.preferred_batch_size' needs a max_batch_size, "
                            "which stays 0 (vLLM batches inside the engine)")
    cache = top.get("response_cache")
    if isinstance(cache, Mapping) and cache.get("enable"):
        problems.append("'response_cache.enable': Triton does not cache the responses of a "
                        "decoupled (streaming) model")
    parameters = top.get("parameters")
    if isinstance(parameters, Mapping):
        problems += [f"'parameters.{key}' is set through {owner}"
                     for key, owner in _OWNED_PARAMETERS.items() if key in parameters]
        problems += [f"'parameters.{key}' is set through serving.priority_queue_policies"
                     for key in sorted(parameters) if key.startswith(LEVEL_QUEUE_POLICY_PREFIX)]
    if problems:
        raise InvalidTritonConfig("triton_config: " + "; ".join(problems))
    message = model_config_pb2.ModelConfig()
    try:
        json_format.ParseDict(dict(overrides), message)
    except json_format.ParseError as exc:
        raise InvalidTritonConfig(f"triton_config is not a valid Triton ModelConfig: {exc}"
                                  f"{_field_hint(overrides)}") from None
    return message


def _by_proto_name(fields: Mapping[str, Any], descriptor: Descriptor) -> dict[str, Any]:
    # ParseDict takes a field's JSON name (maxBatchSize) as well as its proto name: a refusal
    # must catch both spellings.
    json_names = {field.json_name: field.name for field in descriptor.fields}
    return {json_names.get(key, key): value for key, value in fields.items()}


def _field_hint(overrides: Mapping[str, Any]) -> str:
    fields = model_config_pb2.ModelConfig.DESCRIPTOR.fields
    names = sorted(field.name for field in fields)
    known = set(names) | {field.json_name for field in fields}
    hints = []
    for key in sorted(set(overrides) - known):
        matches = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
        if matches:
            hints.append(f"'{key}': did you mean {', '.join(repr(m) for m in matches)}?")
    return f" ({'; '.join(hints)})" if hints else ""


def build(name: str, serving: ServingSettings, overrides: Mapping[str, Any]
          ) -> model_config_pb2.ModelConfig:
    """The full config of one version, served under Triton model name ``name``."""
    config = interface()
    config.name = name
    apply_serving(config, serving)
    for key, value in _DEFAULT_PARAMETERS.items():
        config.parameters[key].string_value = value
    # MergeFrom: scalars in the override win, maps (parameters) merge key by key, repeated fields
    # append; the owned repeated fields (input, output, instance_group) were refused above.
    config.MergeFrom(parse_overrides(overrides))
    return config


def to_json_dict(config: model_config_pb2.ModelConfig) -> dict[str, Any]:
    """The JSON form Triton's load API and our backend read (proto field names)."""
    return json_format.MessageToDict(config, preserving_proto_field_name=True)


@lru_cache(maxsize=256)
def _built_json(name: str, serving_json: str, overrides_json: str) -> str:
    return json.dumps(to_json_dict(build(name, ServingSettings.model_validate_json(serving_json),
                                         json.loads(overrides_json))))


def check(name: str, serving: ServingSettings, overrides: Mapping[str, Any],
          engine_args: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Build the config and run the backend's own load-time check on it; returns the JSON form.

    ``source`` stands in for the model path the node will resolve, so the check sees the engine
    arguments the backend will see."""
    # The config depends on the model's name, its serving settings and overrides, which a model's
    # versions usually share: building it (protobuf, then its JSON form) was ~0.2 ms of CPU per
    # registration, and is done once per combination. Each call gets its own copy.
    config: dict[str, Any] = json.loads(_built_json(
        name, serving.model_dump_json(), json.dumps(overrides, sort_keys=True)))
    try:
        settings = settings_from(config, {**engine_args, "model": source})
    except SettingsError as exc:
        raise InvalidTritonConfig(f"the backend would refuse this version's config: {exc}") \
            from None
    max_num_seqs = engine_args.get("max_num_seqs")
    capacity = settings.max_inflight or (max_num_seqs if isinstance(max_num_seqs, int) else None)
    if capacity is not None and serving.reserved_urgent_slots >= capacity:
        raise InvalidTritonConfig(
            f"serving.reserved_urgent_slots {serving.reserved_urgent_slots} leaves none of the "
            f"{capacity} engine slots for levels above {serving.urgent_priority_level}")
    return config


def instance_groups(placement: Placement | None, simulated: bool = False
                    ) -> list[model_config_pb2.ModelInstanceGroup]:
    """The instance groups of a placed engine.

    One GPU per engine: ``KIND_GPU`` listing the GPUs, one instance (engine) on each. Several
    GPUs per engine (tensor parallelism): ``KIND_MODEL``, one instance that vLLM spreads over
    the GPUs the backend pins it to. The CPU: ``KIND_CPU``. On a simulated node Triton has no
    GPUs and refuses ``KIND_GPU``, so the engines become ``KIND_MODEL`` instances and the
    decision stays in the config's parameters."""
    group = model_config_pb2.ModelInstanceGroup
    if placement is None:
        return [group(count=1, kind=group.KIND_MODEL)]
    engines = len(placement.engines)
    if placement.device == Device.CPU:
        return [group(count=engines, kind=group.KIND_CPU)]
    if simulated:
        return [group(count=engines, kind=group.KIND_MODEL)]
    if placement.tensor_parallel_size == 1:
        return [group(count=1, kind=group.KIND_GPU, gpus=list(placement.gpus))]
    return [group(count=1, kind=group.KIND_MODEL)]


def apply_placement(config: model_config_pb2.ModelConfig, engine_args: dict[str, Any],
                    placement: Placement | None, simulated: bool = False) -> None:
    """Write a placement into the config and the engine arguments."""
    del config.instance_group[:]
    config.instance_group.extend(instance_groups(placement, simulated))
    if placement is None or placement.device != Device.GPU:
        return
    # The backend pins the engine to these GPUs; shown in Triton's config API either way.
    config.parameters["placement_gpus"].string_value = ";".join(
        ",".join(str(index) for index in engine) for engine in placement.engines)
    utilization = placement.gpu_memory_utilization
    if utilization is not None:
        config.parameters["gpu_memory_utilization"].string_value = str(utilization)
    if simulated:
        config.parameters["placement_simulated"].string_value = "true"
        return
    if utilization is not None:
        # vLLM sizes itself to this fraction of each GPU: what placement booked.
        engine_args["gpu_memory_utilization"] = utilization


def load_request(triton_name: str, spec: VersionSpec, placement: Placement | None = None,
                 simulated: bool = False) -> tuple[str, dict[str, bytes]]:
    """``load_model``'s config JSON and files for one registry version under ``triton_name``,
    placed as ``placement`` says.

    Triton's version directory is the registry's version number and the config names only that
    version, so loading another version under the same name is a config change: Triton loads it
    beside the one serving, moves traffic when it is ready, and unloads the old one once its
    in-flight requests are done. A failed load leaves the old one serving."""
    config = build(triton_name, ServingSettings.model_validate(spec.serving), spec.triton_config)
    config.version_policy.specific.versions[:] = [spec.number]
    # Triton ignores new files under an unchanged config; the registry's own name for the version
    # keeps every config distinct.
    config.parameters["registry_version"].string_value = f"{spec.model}/{spec.number}"
    engine_args = {**spec.engine_args, "model": spec.source, "served_model_name": triton_name}
    apply_placement(config, engine_args, placement, simulated)
    files = {f"file:{spec.number}/model.json": json.dumps(engine_args, indent=2).encode()}
    return json_format.MessageToJson(config, preserving_proto_field_name=True), files
