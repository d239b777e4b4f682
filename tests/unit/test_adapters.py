"""Unit tests for run-time LoRA adapters: the checks on real adapter files (made by
``make_random_adapter``), the registry, and control requests' parsing and authorisation. No engine
is started: everything vLLM's worker would refuse must be refused here first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig
from vllm.config.lora import LoRAConfig

from control_plane.demo_adapter import make_random_adapter
from control_plane.triton.runtime import TritonRuntime
from control_plane.triton.server import TritonServer
from llm_backend.adapter_control import (
    REPOSITORY_KEY_ENV,
    AdapterAction,
    AdapterControl,
    ControlKey,
    is_control_request,
    parse_control,
    state_json,
)
from llm_backend.adapters import (
    AdapterFiles,
    AdapterLimits,
    AdapterRefused,
    AdapterRegistry,
    AdapterState,
    LoraTargets,
    inspect_adapter,
)
from llm_backend.errors import InvalidRequest
from llm_backend.settings import SettingsError

# A small Llama (SmolLM2's shape, shrunk): grouped-query attention and a head_dim of its own, so a
# shape computed from the wrong dimension shows.
MODEL = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 96,
         "num_hidden_layers": 2, "max_position_embeddings": 512}
TARGETS = LoraTargets.from_hf_config(LlamaConfig(**MODEL))
LORA_CONFIG = LoRAConfig(max_lora_rank=16, max_loras=2)
ALL_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
KEY = "node-repository-key-123"


def model_dir(root: Path, **changes: object) -> Path:
    directory = root / "model"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({**MODEL, **changes}))
    return directory


def adapter(tmp_path: Path, name: str = "a", rank: int = 8, modules=("q_proj", "v_proj"),
            **model_changes: object) -> Path:
    return make_random_adapter(tmp_path / name, rank, seed=1, target_modules=modules,
                               model_dir=model_dir(tmp_path / f"{name}-model", **model_changes))


def edit_config(directory: Path, **changes: object) -> None:
    path = directory / "adapter_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def edit_tensors(directory: Path, edit) -> None:
    path = directory / "adapter_model.safetensors"
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path))


def refusal(path: object) -> str:
    with pytest.raises(AdapterRefused) as refused:
        inspect_adapter(path, TARGETS, LORA_CONFIG)
    return refused.value.message


# -- the model's modules --------------------------------------------------------------------------
def test_targets_come_from_the_hf_config():
    assert TARGETS.num_layers == 2
    assert TARGETS.modules["self_attn.q_proj"] == (64, 32)   # 4 heads of 8, not hidden_size
    assert TARGETS.modules["self_attn.k_proj"] == (64, 16)   # 2 key/value heads
    assert TARGETS.modules["self_attn.o_proj"] == (32, 64)
    assert TARGETS.modules["mlp.down_proj"] == (96, 64)
    assert TARGETS.leaf_names == list(ALL_MODULES)


def test_a_model_of_unknown_layout_cannot_enable_lora():
    with pytest.raises(SettingsError, match="GPT2LMHeadModel; serve it without enable_lora"):
        LoraTargets.from_hf_config(LlamaConfig(**{**MODEL, "architectures": ["GPT2LMHeadModel"]}))


# -- adapter files --------------------------------------------------------------------------------
@pytest.mark.parametrize("modules", [("q_proj", "v_proj"), ALL_MODULES])
def test_an_adapter_that_fits_passes(tmp_path, modules):
    path = adapter(tmp_path, modules=modules)
    assert inspect_adapter(str(path), TARGETS, LORA_CONFIG) == AdapterFiles(str(path), 8)


def test_a_rank_over_max_lora_rank_is_refused_with_vllms_reason(tmp_path):
    assert "LoRA rank 32 is greater than max_lora_rank 16" in refusal(str(adapter(tmp_path,
                                                                                  rank=32)))


def test_a_rank_pattern_over_the_limit_is_refused(tmp_path):
    path = adapter(tmp_path)
    edit_config(path, rank_pattern={"v_proj": 64})
    assert "LoRA rank 64 is greater than max_lora_rank 16" in refusal(str(path))


def test_a_target_module_the_model_lacks_is_refused_by_name(tmp_path):
    path = adapter(tmp_path)
    edit_config(path, target_modules=["q_proj", "w_proj"])
    message = refusal(str(path))
    assert "target module 'w_proj' is not one the model takes LoRA on" in message
    assert "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj" in message


def test_tensors_for_another_models_shapes_are_refused(tmp_path):
    message = refusal(str(adapter(tmp_path, hidden_size=128)))
    assert "self_attn.q_proj.lora_A.weight has shape [8, 128]; the model needs [8, 64]" in message
    assert "(and " in message, "every tensor is wrong; the first few are listed, the rest counted"


def test_tensors_for_layers_the_model_lacks_are_refused(tmp_path):
    assert "the model has 2 layers" in refusal(str(adapter(tmp_path, num_hidden_layers=3)))


def test_a_tensor_whose_rank_differs_from_the_config_is_refused(tmp_path):
    path = adapter(tmp_path)
    edit_config(path, r=4, lora_alpha=8)
    assert "has shape [8, 64]; the model needs [4, 64] (rank 4)" in refusal(str(path))


@pytest.mark.parametrize("key, problem", [
    ("base_model.model.model.embed_tokens.weight", "is not a LoRA weight"),
    ("base_model.model.model.layers.0.input_layernorm.lora_A.weight",
     "model.layers.0.input_layernorm is not a module the model takes LoRA on"),
    ("base_model.model.lm_head.lora_A.weight", "lm_head is not a module the model takes LoRA on"),
])
def test_tensors_vllm_would_refuse_are_refused(tmp_path, key, problem):
    import torch
    path = adapter(tmp_path)
    edit_tensors(path, lambda tensors: tensors.__setitem__(key, torch.zeros(8, 64)))
    assert problem in refusal(str(path))


def test_half_a_lora_pair_is_refused(tmp_path):
    path = adapter(tmp_path)
    key = "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"
    edit_tensors(path, lambda tensors: tensors.pop(key))
    assert "module model.layers.1.self_attn.v_proj has lora_B missing" in refusal(str(path))


def test_integer_weights_are_refused(tmp_path):
    import torch
    path = adapter(tmp_path)
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    edit_tensors(path, lambda t: t.__setitem__(key, torch.zeros(8, 64, dtype=torch.int32)))
    assert "is I32, not a floating-point type" in refusal(str(path))


def test_weights_that_are_not_safetensors_are_refused(tmp_path):
    path = adapter(tmp_path)
    (path / "adapter_model.safetensors").write_bytes(b"\x00" * 64)
    assert "adapter_model.safetensors is not a readable safetensors file" in refusal(str(path))


def test_an_adapter_without_tensors_is_refused(tmp_path):
    path = adapter(tmp_path)
    save_file({}, str(path / "adapter_model.safetensors"))
    assert "holds no LoRA weights" in refusal(str(path))


@pytest.mark.parametrize("changes, problem", [
    ({"use_dora": True}, "vLLM does not yet support DoRA"),
    ({"bias": "all"}, "Adapter bias is not supported"),
    ({"modules_to_save": ["score"]}, "modules_to_save ['score'] replaces whole modules"),
    ({"peft_type": "IA3"}, "is a IA3 adapter; only LoRA adapters load"),
    ({"r": 0}, "LoRA rank `r` must be a positive integer"),
])
def test_peft_features_vllm_refuses_are_refused(tmp_path, changes, problem):
    path = adapter(tmp_path)
    edit_config(path, **changes)
    assert problem in refusal(str(path))


def test_a_config_without_rank_is_refused(tmp_path):
    path = adapter(tmp_path)
    config = json.loads((path / "adapter_config.json").read_text())
    del config["r"]
    (path / "adapter_config.json").write_text(json.dumps(config))
    assert "Missing required configuration fields: {'r'}" in refusal(str(path))


def test_a_config_that_is_not_json_is_refused(tmp_path):
    path = adapter(tmp_path)
    (path / "adapter_config.json").write_text("{not json")
    assert "adapter_config.json is not readable JSON" in refusal(str(path))


def test_paths_without_an_adapter_are_refused(tmp_path):
    assert f"{tmp_path / 'nowhere'} is not a directory on the node" in refusal(
        str(tmp_path / "nowhere"))
    assert "'relative/dir' must be an absolute path on the node" in refusal("relative/dir")
    assert "must be the adapter's directory on the node, got None" in refusal(None)
    (tmp_path / "empty").mkdir()
    assert "has no adapter_config.json and no adapter_model.safetensors" in refusal(
        str(tmp_path / "empty"))
    path = adapter(tmp_path)
    (path / "adapter_model.safetensors").unlink()
    assert "has no adapter_model.safetensors (a PEFT LoRA adapter" in refusal(str(path))


def test_the_demo_adapter_is_for_the_demo_model(tmp_path):
    config = json.loads((adapter(tmp_path) / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "SmolLM2-135M-Instruct"
    assert (config["peft_type"], config["r"], config["target_modules"]) == (
        "LORA", 8, ["q_proj", "v_proj"])
    with pytest.raises(ValueError, match="'w_proj'"):
        adapter(tmp_path, name="b", modules=("w_proj",))


# -- the registry ---------------------------------------------------------------------------------
LIMITS = AdapterLimits.from_lora_config(LORA_CONFIG)


def loaded(registry: AdapterRegistry, name: str, path: str = "/adapters/x", rank: int = 8):
    if registry.plan_load(name, path) is None:
        registry.register(registry.new_adapter(name, AdapterFiles(path, rank)))
    return registry.lookup(name)


def test_limits_default_max_cpu_loras_to_max_loras():
    assert LIMITS == AdapterLimits(max_loras=2, max_lora_rank=16, max_adapters=2)
    more = LoRAConfig(max_lora_rank=8, max_loras=1, max_cpu_loras=3)
    assert AdapterLimits.from_lora_config(more).max_adapters == 3


def test_a_load_of_the_same_name_and_path_is_a_no_op_and_ids_are_unique():
    registry = AdapterRegistry(LIMITS)
    first = loaded(registry, "a", "/adapters/a")
    assert registry.plan_load("a", "/adapters/a") is first
    second = loaded(registry, "b", "/adapters/b")
    assert first.lora.lora_int_id != second.lora.lora_int_id
    assert (second.lora.lora_name, second.lora.lora_path) == ("b", "/adapters/b")


def test_a_load_of_a_name_from_another_path_is_refused():
    registry = AdapterRegistry(LIMITS)
    loaded(registry, "a", "/adapters/a")
    with pytest.raises(AdapterRefused, match="'a' is loaded from /adapters/a; unload it first"):
        registry.plan_load("a", "/adapters/other")


def test_one_adapter_over_the_limit_is_refused_naming_it():
    registry = AdapterRegistry(LIMITS)
    loaded(registry, "a")
    loaded(registry, "b")
    with pytest.raises(AdapterRefused, match=r"holds 2 adapters \(a, b\), its limit "
                                             r"\(engine arg max_cpu_loras"):
        registry.plan_load("c", "/adapters/c")


def test_an_unknown_lora_name_is_refused_listing_the_loaded_ones():
    registry = AdapterRegistry(LIMITS)
    with pytest.raises(InvalidRequest, match="'sql' is not loaded; loaded: none"):
        registry.lookup("sql")
    loaded(registry, "a")
    loaded(registry, "b")
    with pytest.raises(InvalidRequest) as refused:
        registry.lookup("sql")
    assert refused.value.message == ("sampling_parameters.lora_name: adapter 'sql' is not "
                                     "loaded; loaded: a, b")


def test_requests_are_counted_and_an_unload_refuses_new_ones():
    registry = AdapterRegistry(LIMITS)
    a = loaded(registry, "a")
    registry.acquire(a)
    registry.acquire(a)
    registry.release(a)
    assert [x.requests_in_flight for x in registry.snapshot()] == [1]

    assert registry.begin_unload("a") is a and a.state is AdapterState.UNLOADING
    with pytest.raises(InvalidRequest, match="'a' is being unloaded; loaded: none"):
        registry.lookup("a")
    with pytest.raises(InvalidRequest, match="'a' was unloaded while the request waited"):
        registry.acquire(a)
    with pytest.raises(AdapterRefused, match="'a' is being unloaded; load it again once"):
        registry.plan_load("a", "/adapters/x")
    assert registry.remove(a) and not registry.remove(a)
    assert registry.begin_unload("a") is None, "unloading what is not loaded: nothing to do"
    assert registry.snapshot() == []


def test_a_request_that_waited_for_a_replaced_adapter_is_refused():
    registry = AdapterRegistry(LIMITS)
    old = loaded(registry, "a", "/adapters/v1")
    registry.begin_unload("a")
    registry.remove(old)
    loaded(registry, "a", "/adapters/v2")
    with pytest.raises(InvalidRequest, match="was unloaded while the request waited"):
        registry.acquire(old)


def test_the_snapshot_is_a_copy_by_name():
    registry = AdapterRegistry(LIMITS)
    loaded(registry, "b")
    a = loaded(registry, "a")
    snapshot = registry.snapshot()
    registry.acquire(a)
    assert [(x.name, x.requests_in_flight) for x in snapshot] == [("a", 0), ("b", 0)]


# -- control requests -----------------------------------------------------------------------------
NODE = ControlKey(KEY)


def control(**parameters: object) -> AdapterControl:
    return parse_control({"repository_key": KEY, **parameters}, NODE)


def test_adapter_control_makes_a_control_request():
    assert is_control_request({"adapter_control": "list", "temperature": 0})
    assert not is_control_request({"temperature": 0, "repository_key": KEY})


def test_the_key_comes_from_the_environment_and_never_shows():
    assert ControlKey.from_environment({}) == ControlKey()
    assert ControlKey.from_environment({REPOSITORY_KEY_ENV: ""}) == ControlKey()
    assert ControlKey.from_environment({REPOSITORY_KEY_ENV: KEY}) == NODE
    assert KEY not in repr(NODE)


def test_a_node_without_a_key_refuses_every_control_request():
    with pytest.raises(InvalidRequest) as refused:
        parse_control({"adapter_control": "list", "repository_key": KEY}, ControlKey())
    assert refused.value.message == ("adapter_control: adapter control needs LLM_REPOSITORY_KEY "
                                     "on the node: the key of its model-repository API")


@pytest.mark.parametrize("sent", [None, "", "wrong-key", KEY + "x", 123, "ünïcode"])
def test_a_wrong_or_absent_key_is_refused_without_saying_more(sent):
    parameters = {"adapter_control": "nonsense", "adapter_name": "../x"}
    if sent is not None:
        parameters["repository_key"] = sent
    with pytest.raises(InvalidRequest) as refused:
        parse_control(parameters, NODE)
    assert refused.value.message == "repository_key: refused"


def test_actions_parse():
    assert control(adapter_control="list") == AdapterControl(AdapterAction.LIST)
    assert control(adapter_control="unload", adapter_name="sql-v2.1") == AdapterControl(
        AdapterAction.UNLOAD, "sql-v2.1")
    assert control(adapter_control="load", adapter_name="a_b", adapter_path="/x//y/") == \
        AdapterControl(AdapterAction.LOAD, "a_b", "/x/y")


def test_an_unknown_action_is_refused_listing_the_actions():
    with pytest.raises(InvalidRequest, match="must be one of load, unload, list, got 'reload'"):
        control(adapter_control="reload")


@pytest.mark.parametrize("name", [None, "", "a" * 65, "a/b", "a b", "ä", 7])
@pytest.mark.parametrize("action", ["load", "unload"])
def test_a_bad_adapter_name_is_refused(action, name):
    with pytest.raises(InvalidRequest, match="adapter_name: must be 1-64 characters"):
        control(adapter_control=action, adapter_name=name, adapter_path="/x")


@pytest.mark.parametrize("path", [None, "", 5])
def test_a_load_without_a_path_is_refused(path):
    with pytest.raises(InvalidRequest, match="adapter_path: load needs the adapter's directory"):
        control(adapter_control="load", adapter_name="a", adapter_path=path)


def test_the_answer_is_the_state_as_json():
    registry = AdapterRegistry(LIMITS)
    a = loaded(registry, "a", "/adapters/a", rank=16)
    registry.acquire(a)
    assert json.loads(state_json(registry.snapshot(), LIMITS)) == {
        "adapters": [{"name": "a", "path": "/adapters/a", "rank": 16, "requests_in_flight": 1}],
        "max_loras": 2, "max_lora_rank": 16, "max_adapters": 2,
    }


# -- the launcher ---------------------------------------------------------------------------------
def test_tritonserver_gets_the_repository_key_as_llm_repository_key(tmp_path, monkeypatch):
    runtime = TritonRuntime(binary=tmp_path / "tritonserver", backends_dir=tmp_path,
                            cache_dir=tmp_path, library_path=(), bundled=False)
    monkeypatch.setenv(REPOSITORY_KEY_ENV, "inherited-key")
    assert TritonServer(tmp_path, runtime=runtime, repository_key=KEY).environment()[
        REPOSITORY_KEY_ENV] == KEY
    assert REPOSITORY_KEY_ENV not in TritonServer(tmp_path, runtime=runtime).environment()
