"""The repository key: the flags tritonserver starts with and the headers each protocol sends."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from control_plane.triton import restricted_api
from control_plane.triton.runtime import TritonRuntime
from control_plane.triton.server import TritonServer

RUNTIME = TritonRuntime(binary=Path("/opt/triton/bin/tritonserver"), backends_dir=Path("/b"),
                        cache_dir=Path("/c"), library_path=(), bundled=False)


def test_flags_restrict_only_the_model_repository_api_on_http_and_grpc():
    assert restricted_api.server_flags("k3y-value_1") == [
        "--http-restricted-api=model-repository:triton-repository-key=k3y-value_1",
        "--grpc-restricted-protocol=model-repository:triton-repository-key=k3y-value_1",
    ]


def test_grpc_sends_the_header_behind_tritons_fixed_prefix_and_http_sends_it_plain():
    assert restricted_api.http_headers("k3y-value_1") == {"triton-repository-key": "k3y-value_1"}
    assert restricted_api.grpc_headers("k3y-value_1") == {
        "triton-grpc-protocol-triton-repository-key": "k3y-value_1"}


@pytest.mark.parametrize("key", ["short", "has:colon-in-it", "has=equals-in-it", "has space in it",
                                 "non-ascii-ключ"])
def test_keys_the_flag_parser_or_grpc_metadata_would_mangle_are_refused(key):
    with pytest.raises(ValueError, match="token_urlsafe"):
        restricted_api.check_key(key)


def test_a_generated_key_is_accepted():
    key = secrets.token_urlsafe(24)
    assert restricted_api.check_key(key) == key


def test_server_without_a_key_keeps_the_repository_api_open():
    command = TritonServer(Path("/repo"), runtime=RUNTIME).command()
    assert not [arg for arg in command if "restricted" in arg]


def test_server_with_a_key_restricts_the_repository_api():
    command = TritonServer(Path("/repo"), runtime=RUNTIME, repository_key="k3y-value_1").command()
    assert restricted_api.server_flags("k3y-value_1") == [
        arg for arg in command if "restricted" in arg]


def test_server_refuses_a_bad_key_before_starting_anything():
    with pytest.raises(ValueError):
        TritonServer(Path("/repo"), runtime=RUNTIME, repository_key="bad:key=")


def test_a_servers_own_environment_wins_over_the_inherited_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "auto")
    pinned = TritonServer(Path("/repo"), runtime=RUNTIME,
                          environment={"VLLM_CPU_OMP_THREADS_BIND": "1"})
    assert pinned.environment()["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert TritonServer(Path("/repo"), runtime=RUNTIME).environment()[
        "VLLM_CPU_OMP_THREADS_BIND"] == "auto"
