"""docker/checks/policy.py: each rule reports a small bad manifest, and the real ones pass."""

from __future__ import annotations

import copy
import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("deploy_policy", ROOT / "docker/checks/policy.py")
assert _spec is not None and _spec.loader is not None
policy = importlib.util.module_from_spec(_spec)
sys.modules["deploy_policy"] = policy  # dataclasses look their module up while being built
_spec.loader.exec_module(policy)

SECURE = {"runAsNonRoot": True, "runAsUser": 10001}

MANIFESTS = yaml.safe_load_all("""
kind: Deployment
metadata: {name: control-plane, namespace: p}
spec:
  template:
    metadata: {labels: {app: control-plane}}
    spec:
      securityContext: {runAsNonRoot: true, runAsUser: 10001}
      containers:
        - name: control-plane
          image: llm-platform/control-plane:0.1.0
          ports: [{name: http, containerPort: 8080}]
          env:
            - name: LLMCP_DATABASE_URL
              valueFrom: {secretKeyRef: {name: db, key: url}}
          startupProbe: {httpGet: {path: /healthz, port: http}}
          livenessProbe: {httpGet: {path: /healthz, port: http}}
          readinessProbe: {httpGet: {path: /readyz, port: 8080}}
---
kind: Deployment
metadata: {name: gateway, namespace: p}
spec:
  template:
    metadata: {labels: {app: gateway}}
    spec:
      securityContext: {runAsNonRoot: true, runAsUser: 10001}
      containers:
        - name: gateway
          image: registry.example/llm-platform/gateway@sha256:0123
          startupProbe: {httpGet: {path: /healthz, port: 8000}}
          livenessProbe: {httpGet: {path: /healthz, port: 8000}}
          readinessProbe: {httpGet: {path: /healthz, port: 8000}}
---
kind: StatefulSet
metadata: {name: node, namespace: p}
spec:
  template:
    metadata: {labels: {app: node}}
    spec:
      securityContext: {runAsNonRoot: true, runAsUser: 10001}
      terminationGracePeriodSeconds: 120
      containers:
        - name: node
          image: llm-platform/node:0.1.0-gpu
          ports: [{name: http, containerPort: 8000}, {name: metrics, containerPort: 8002}]
          env:
            - name: POD_NAME
              valueFrom: {fieldRef: {fieldPath: metadata.name}}
            - {name: LLM_NODE_ADVERTISE_HOST, value: $(POD_NAME).node}
            - {name: LLM_NODE_TOKEN_FILE, value: /run/secrets/node-token}
            - {name: LLM_NODE_API_KEY_REF, value: "file:/run/secrets/triton-repository-key"}
          startupProbe: {httpGet: {path: /v2/health/live, port: http}}
          livenessProbe: {httpGet: {path: /v2/health/live, port: http}}
          readinessProbe: {httpGet: {path: /v2/health/ready, port: http}}
---
kind: Job
metadata: {name: migrate, namespace: p}
spec:
  template:
    metadata: {labels: {app: migrate}}
    spec:
      securityContext: {runAsNonRoot: true, runAsUser: 10001}
      containers:
        - {name: migrate, image: "llm-platform/control-plane:0.1.0"}
---
kind: NetworkPolicy
metadata: {name: node-ingress, namespace: p}
spec:
  podSelector: {matchLabels: {app: node}}
  policyTypes: [Ingress]
  ingress:
    - from:
        - podSelector: {matchLabels: {app: control-plane}}
        - podSelector: {matchExpressions: [{key: app, operator: In, values: [gateway]}]}
      ports: [{port: 8000}, {port: 8001}, {port: metrics}]
""")
GOOD: list[dict[str, Any]] = list(MANIFESTS)


def manifests() -> list[dict[str, Any]]:
    return copy.deepcopy(GOOD)


def by_name(documents: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(doc for doc in documents if doc["metadata"]["name"] == name)


def container(documents: list[dict[str, Any]], name: str) -> dict[str, Any]:
    spec: dict[str, Any] = by_name(documents, name)["spec"]["template"]["spec"]
    return spec["containers"][0]  # type: ignore[no-any-return]


def messages(documents: list[dict[str, Any]]) -> list[str]:
    return [str(finding) for finding in policy.check_manifests("overlay", documents)]


def test_the_good_manifests_pass():
    assert messages(manifests()) == []


@pytest.mark.parametrize(("image", "expected"), [
    ("llm-platform/gateway", "has no tag"),
    ("llm-platform/gateway:latest", "uses 'latest'"),
    ("localhost:5000/llm-platform/gateway", "has no tag"),
])
def test_an_unpinned_image_is_reported(image, expected):
    documents = manifests()
    container(documents, "gateway")["image"] = image
    [problem] = messages(documents)
    assert problem.startswith("overlay: Deployment/gateway container gateway: ")
    assert expected in problem


@pytest.mark.parametrize("security", [
    None, {"runAsNonRoot": False}, {"runAsNonRoot": True, "runAsUser": 0}])
def test_a_container_that_may_run_as_root_is_reported(security):
    documents = manifests()
    pod = by_name(documents, "migrate")["spec"]["template"]["spec"]
    pod.pop("securityContext")
    if security is not None:
        pod["containers"][0]["securityContext"] = security
    [problem] = messages(documents)
    assert "Job/migrate container migrate: may run as root" in problem


def test_a_container_setting_overrides_the_pods():
    documents = manifests()
    container(documents, "gateway")["securityContext"] = {"runAsUser": 0}
    assert any("may run as root" in problem for problem in messages(documents))


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("LLMGW_GATEWAY_SECRET", "s3cret", "LLMGW_GATEWAY_SECRET looks like a secret"),
    ("LLMGW_CONTROL_PLANE_TOKEN", "/etc/token", "looks like a secret"),
    ("REPOSITORY_KEY", "abc", "REPOSITORY_KEY looks like a secret"),
    ("PGPASSWORD", "pw", "PGPASSWORD looks like a secret"),
    ("LLMCP_DATABASE_URL", "postgresql+psycopg://llm:pw@db/llm", "a URL with a password"),
])
def test_a_literal_secret_in_the_environment_is_reported(name, value, expected):
    documents = manifests()
    container(documents, "control-plane")["env"] = [{"name": name, "value": value}]
    [problem] = messages(documents)
    assert "Deployment/control-plane container control-plane" in problem
    assert expected in problem


@pytest.mark.parametrize(("name", "value"), [
    ("LLMCP_TOKENIZER_MAX_BYTES", "33554432"), ("MONKEY", "banana"),
    ("LLM_NODE_REPOSITORY_KEY_FILE", "/run/secrets/triton-repository-key"),
    ("LLM_NODE_API_KEY_REF", "file:/run/secrets/triton-repository-key"),
])
def test_a_name_that_is_no_secret_or_a_value_that_names_a_file_passes(name, value):
    documents = manifests()
    container(documents, "control-plane")["env"] = [{"name": name, "value": value}]
    assert messages(documents) == []


def test_a_reference_to_a_variable_defined_later_is_reported():
    documents = manifests()
    env = container(documents, "node")["env"]
    env.append(env.pop(0))
    [problem] = messages(documents)
    assert "LLM_NODE_ADVERTISE_HOST refers to $(POD_NAME), which is not defined before it" \
        in problem


def test_a_secret_with_values_in_the_manifests_is_reported():
    documents = [*manifests(), {"kind": "Secret", "metadata": {"name": "db"},
                                "stringData": {"url": "postgresql://x"}}]
    [problem] = messages(documents)
    assert problem.startswith("overlay: Secret/db: a Secret with values")


@pytest.mark.parametrize(("name", "probe", "change", "expected"), [
    ("control-plane", "livenessProbe", {"httpGet": {"path": "/readyz", "port": 8080}},
     ("livenessProbe checks '/readyz', which is not this image's livenessProbe endpoint: "
      "use /healthz")),
    ("node", "readinessProbe", {"httpGet": {"path": "/metrics", "port": "http"}},
     "use /v2/health/ready"),
    ("node", "startupProbe", {"httpGet": {"path": "/v2/health/live", "port": "metrics"}},
     "startupProbe checks port 8002, but the endpoint is on 8000"),
    ("gateway", "readinessProbe", {"tcpSocket": {"port": 8000}},
     "readinessProbe is not an HTTP probe"),
    ("gateway", "startupProbe", None, "has no startupProbe"),
])
def test_a_probe_off_the_images_real_endpoints_is_reported(name, probe, change, expected):
    documents = manifests()
    if change is None:
        container(documents, name).pop(probe)
    else:
        container(documents, name)[probe] = change
    [problem] = messages(documents)
    assert f"container {name}: " in problem
    assert expected in problem


@pytest.mark.parametrize(("grace", "env", "expected"), [
    (None, [], "terminationGracePeriodSeconds is 30, but a node needs 100 s to stop"),
    (100, [], "is 100, but a node needs 100 s"),
    (120, [{"name": "LLM_NODE_STOP_TIMEOUT_SECONDS", "value": "300"}], "needs 310 s"),
])
def test_a_node_killed_before_it_has_drained_is_reported(grace, env, expected):
    documents = manifests()
    spec = by_name(documents, "node")["spec"]["template"]["spec"]
    spec.pop("terminationGracePeriodSeconds")
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    spec["containers"][0]["env"] += env
    [problem] = messages(documents)
    assert problem.startswith("overlay: StatefulSet/node: ")
    assert expected in problem


def test_a_job_of_a_platform_image_needs_no_probe():
    assert "livenessProbe" not in container(GOOD, "migrate")
    assert messages(manifests()) == []


def node_policy(documents: list[dict[str, Any]]) -> dict[str, Any]:
    return by_name(documents, "node-ingress")["spec"]  # type: ignore[no-any-return]


def test_a_node_no_policy_selects_is_reported():
    documents = manifests()
    node_policy(documents)["podSelector"] = {"matchLabels": {"app": "other"}}
    [problem] = messages(documents)
    assert "StatefulSet/node: no NetworkPolicy selects the node's pods" in problem


def test_an_egress_only_policy_does_not_cover_a_node():
    documents = manifests()
    node_policy(documents)["policyTypes"] = ["Egress"]
    assert "no NetworkPolicy selects" in messages(documents)[0]


@pytest.mark.parametrize(("peer", "expected"), [
    ({"podSelector": {}}, "admits Job/migrate, StatefulSet/node"),
    ({"podSelector": {"matchLabels": {"app": "migrate"}}}, "admits Job/migrate"),
    ({"namespaceSelector": {"matchLabels": {"team": "ops"}}}, "pods of other namespaces"),
    ({"ipBlock": {"cidr": "10.0.0.0/8"}}, "admits addresses 10.0.0.0/8"),
    ({"podSelector": {"matchLabels": {"app": "nobody"}}}, "selects no pod"),
])
def test_a_node_port_reachable_by_other_pods_is_reported(peer, expected):
    documents = manifests()
    node_policy(documents)["ingress"][0]["from"].append(peer)
    [problem] = messages(documents)
    assert problem.startswith("overlay: NetworkPolicy/node-ingress: ")
    assert expected in problem
    assert "StatefulSet/node's ports 8000/8001/8002" in problem


@pytest.mark.parametrize(("ports", "expected"), [
    (None, "8000/8001/8002"),
    ([{"port": "metrics"}], "ports 8002:"),
    ([{"port": 7000, "endPort": 8000}], "ports 8000:"),
])
def test_a_rule_admitting_everyone_to_a_node_port_is_reported(ports, expected):
    documents = manifests()
    rule: dict[str, Any] = {"ports": ports} if ports else {}
    node_policy(documents)["ingress"].append(rule)
    [problem] = messages(documents)
    assert "admits every source to StatefulSet/node's" in problem
    assert expected in problem


@pytest.mark.parametrize("ports", [[{"port": 9000}], [{"port": 8000, "protocol": "UDP"}]])
def test_a_rule_for_other_ports_is_not_a_node_port_rule(ports):
    documents = manifests()
    node_policy(documents)["ingress"].append({"ports": ports})
    assert messages(documents) == []


# --- Dockerfiles ---------------------------------------------------------------------------

GOOD_DOCKERFILE = """\
# syntax=docker/dockerfile:1
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
FROM ${PYTHON_IMAGE} AS base
RUN useradd --uid 10001 llm
USER 10001:10001

FROM base AS build
USER root
RUN pip install \\
    --no-cache-dir x==1
USER llm

FROM build
COPY --from=build --chown=llm /opt/keys.txt control_plane/ /opt/app/
ENV LLM_NODE_TOKEN_FILE=/run/secrets/node-token HOME=/home/llm
HEALTHCHECK CMD ["python", "-c", \\
    "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/v2/health/ready')"]
"""


def dockerfile_messages(text: str, source: str = "docker/node/Dockerfile") -> list[str]:
    return [str(finding) for finding in policy.check_dockerfile(source, text)]


def test_a_good_dockerfile_passes():
    assert dockerfile_messages(GOOD_DOCKERFILE) == []


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm", "ARG PYTHON_IMAGE=python",
     "line 3 FROM: image 'python' has no tag"),
    ("ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm", "ARG PYTHON_IMAGE",
     "line 3 FROM: ${PYTHON_IMAGE} uses an ARG without a default"),
    ("FROM base AS build", "FROM ubuntu:latest AS build",
     "line 7 FROM: image 'ubuntu:latest' uses 'latest'"),
    ("USER llm\n", "", "final stage: runs as root"),
    ("FROM build\n", "FROM build\nUSER root\n", "final stage: runs as root"),
    ("HOME=/home/llm", "API_KEY=abc123", "API_KEY looks like a secret but holds a literal"),
    ("FROM base AS build", "FROM base AS build\nARG HF_TOKEN", "build argument HF_TOKEN"),
    ("FROM build\n", "FROM build\nCOPY --chown=llm app/.env /app/\n", "copies 'app/.env'"),
    ("FROM build\n", "FROM build\nADD secrets /run/\n", "copies 'secrets', which looks like"),
    ("FROM build\n", "FROM build\nCOPY a tls/server.key /etc/\n", "copies 'tls/server.key'"),
    ("/v2/health/ready", "/v2/models/x/ready", "'/v2/models/x/ready', not a real endpoint"),
    ("127.0.0.1:8000", "127.0.0.1:8002", "calls port 8002, but the endpoint is on 8000"),
])
def test_a_bad_dockerfile_is_reported(old, new, expected):
    assert old in GOOD_DOCKERFILE
    [problem] = dockerfile_messages(GOOD_DOCKERFILE.replace(old, new))
    assert problem.startswith("docker/node/Dockerfile: ")
    assert expected in problem


def test_a_heredocs_body_is_no_instruction():
    text = GOOD_DOCKERFILE.replace("FROM build\n", "FROM build\nRUN <<'EOF'\nUSER root\nEOF\n")
    assert dockerfile_messages(text) == []


def test_a_base_image_needs_no_user_of_its_own():
    base = "ARG DEBIAN=debian:12.8-slim\nFROM ${DEBIAN}\nRUN true\n"
    assert dockerfile_messages(base, "docker/base/python.Dockerfile") == []
    [problem] = dockerfile_messages(base, "docker/gateway/Dockerfile")
    assert "final stage: runs as root" in problem


def test_dockerfiles_are_found_by_either_naming(tmp_path):
    for name in ("node/Dockerfile", "node/Dockerfile.gpu", "base/python.Dockerfile",
                 "base/build-base.sh"):
        (tmp_path / "docker" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "docker" / name).write_text("")
    assert [str(p.relative_to(tmp_path)) for p in policy.dockerfiles(tmp_path)] == [
        "docker/base/python.Dockerfile", "docker/node/Dockerfile", "docker/node/Dockerfile.gpu"]


def test_a_dockerfile_of_another_image_keeps_its_own_healthcheck():
    assert dockerfile_messages(GOOD_DOCKERFILE, "docker/tools/Dockerfile") == []


# --- Compose -------------------------------------------------------------------------------

GOOD_COMPOSE = """
services:
  control-plane:
    build: {context: .., dockerfile: docker/control-plane/Dockerfile}
    image: llm-platform/control-plane:${TAG:-dev}
    environment:
      LLMCP_DATABASE_URL: postgresql+psycopg://llm@postgres/llm
      LLMCP_REPOSITORY_KEY_FILE: /run/secrets/triton-repository-key
    secrets: [triton-repository-key]
    healthcheck:
      test: ["CMD", "python", "-c",
             "import urllib.request as u; u.urlopen('http://localhost:8080/readyz')"]
  postgres:
    image: postgres:17.2-alpine
    user: "70:70"
    environment:
      - POSTGRES_PASSWORD_FILE=/run/secrets/db-password
    healthcheck:
      test: pg_isready -U llm
secrets:
  triton-repository-key: {file: ./secrets/triton-repository-key}
"""


def compose_messages(text: str) -> list[str]:
    return [str(finding) for finding in policy.check_compose("compose.yaml", yaml.safe_load(text))]


def test_a_good_compose_file_passes():
    assert compose_messages(GOOD_COMPOSE) == []


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("${TAG:-dev}", "latest", "service control-plane: image 'llm-platform/control-plane:latest'"),
    ("${TAG:-dev}", "${TAG}", "needs a variable without a default"),
    ('user: "70:70"', 'user: "0:0"', "service postgres: may run as root"),
    ('user: "70:70"', "", "service postgres: may run as root"),
    ("POSTGRES_PASSWORD_FILE=/run/secrets/db-password", "POSTGRES_PASSWORD=pw",
     "POSTGRES_PASSWORD looks like a secret but comes from the environment"),
    ("POSTGRES_PASSWORD_FILE=/run/secrets/db-password", "POSTGRES_PASSWORD",
     "POSTGRES_PASSWORD looks like a secret"),
    ("/run/secrets/triton-repository-key", "${REPOSITORY_KEY}", "declare it under secrets:"),
    ("llm@postgres", "llm:pw@postgres", "LLMCP_DATABASE_URL holds a URL with a password"),
    ("8080/readyz", "8080/api/v1/nodes", "'/api/v1/nodes', not a real endpoint"),
])
def test_a_bad_compose_file_is_reported(old, new, expected):
    assert old in GOOD_COMPOSE
    [problem] = compose_messages(GOOD_COMPOSE.replace(old, new))
    assert problem.startswith("compose.yaml: ")
    assert expected in problem


# --- the repository's own files ------------------------------------------------------------

@pytest.mark.skipif(shutil.which("kubectl") is None,
                    reason="renders the overlays with `kubectl kustomize`, and kubectl is absent")
def test_the_repositorys_manifests_dockerfiles_and_compose_file_pass():
    findings, report = policy.check_repository(ROOT)
    assert [str(finding) for finding in findings] == []
    assert "checked docker/k8s/overlays/cpu-demo (rendered)" in report
    assert "checked docker/k8s/overlays/gpu (rendered)" in report
