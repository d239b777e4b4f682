"""Deployment policy: what hadolint, the Kubernetes schemas and the Compose schema cannot see.

Reads the rendered Kustomize overlays (``kubectl kustomize``), every Dockerfile under docker/
and docker/compose.yaml, and fails, naming the file and the object, when:

- an image is not pinned (no tag, or ``latest``; a FROM's ARG without a pinned default),
- a container may run as root (a Dockerfile's final stage without a non-root USER, except the
  base images under docker/base/),
- a secret is held in the manifests (an env var named like a secret with a literal value, a URL
  with a password, a Secret with data; in Compose, secrets come from ``secrets:``),
- a probe or healthcheck points at something other than the image's real endpoints,
- a node pod's grace period does not cover its drain and Triton's stop timeout,
- a node pod's ports (repository API and inference on 8000/8001, metrics on 8002) can be
  reached by pods other than the control plane's and the gateway's.

Usage: ``python docker/checks/policy.py [--root DIR]``; exit status 1 when anything fails.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

Document = Mapping[str, Any]


@dataclass(frozen=True)
class Finding:
    """One broken rule: where (file and object) and what to do about it."""

    source: str
    obj: str
    message: str

    def __str__(self) -> str:
        return f"{self.source}: {self.obj}: {self.message}"


# The contract of issue 17: each platform image's real endpoints, by the probe that may use them.
@dataclass(frozen=True)
class Endpoints:
    port: int
    liveness: frozenset[str]
    readiness: frozenset[str]
    startup: frozenset[str]

    def for_probe(self, kind: str) -> frozenset[str]:
        return {"livenessProbe": self.liveness, "readinessProbe": self.readiness,
                "startupProbe": self.startup}[kind]

    @property
    def any(self) -> frozenset[str]:
        return self.liveness | self.readiness | self.startup


# Liveness never depends on the database (/readyz would restart every control plane when it is
# down); readiness is what says "can serve".
ENDPOINTS: dict[str, Endpoints] = {
    "control-plane": Endpoints(8080, frozenset({"/healthz"}), frozenset({"/readyz"}),
                               frozenset({"/healthz"})),
    "gateway": Endpoints(8000, frozenset({"/healthz"}), frozenset({"/healthz"}),
                         frozenset({"/healthz"})),
    "node": Endpoints(8000, frozenset({"/v2/health/live"}), frozenset({"/v2/health/ready"}),
                      frozenset({"/v2/health/live"})),
}
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")
# Who may reach a node's ports: 8000/8001 carry the repository API and inference, 8002 metrics.
NODE_PORTS = (8000, 8001, 8002)
NODE_CLIENTS = frozenset({"control-plane", "gateway"})
# The node agent's stop: leave, wait the drain time, give Triton its stop timeout (defaults).
NODE_STOP_SECONDS = {"LLM_NODE_DRAIN_SECONDS": 10.0, "LLM_NODE_STOP_TIMEOUT_SECONDS": 90.0}

IMAGE_COMPONENT = re.compile(r"(?:^|/)llm-platform/(?P<component>control-plane|gateway|node)$")
# Whole words of a variable's name (LLMCP_TOKENIZER_MAX_BYTES is no token); passwords however
# they are spelled (PGPASSWORD).
SECRET_NAME = re.compile(r"(^|_)(TOKEN|SECRET|KEY|CREDENTIALS?)(_|$)|PASSW(OR)?D", re.IGNORECASE)
# A value that names where a secret lies rather than holding it.
SECRET_FILE = re.compile(r"^(file:)?/run/secrets/\S+$")
URL_CREDENTIALS = re.compile(r"://[^/\s:@]+:[^/\s@]+@")
# Files that hold secrets by their name; COPY/ADD of one bakes it into a layer for good.
SECRET_FILE_NAME = re.compile(
    r"(^|/)(\.env(\.[\w.-]+)?|secrets?|id_rsa|id_ed25519|[^/]+\.(pem|key))/?$")
URL = re.compile(r"https?://[^/\s'\"]+?(?::(?P<port>\d+))?(?P<path>/[^\s'\"?]*)")
BASE_IMAGES = Path("docker/base")
WORKLOADS = {"Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"}


# --- images --------------------------------------------------------------------------------

def image_tag(image: str) -> str | None:
    """The tag of an image reference, "@digest" for a digest, None without either."""
    if "@" in image:
        return "@" + image.split("@", 1)[1]
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def image_component(image: str) -> str | None:
    """Which platform image (control-plane, gateway, node) a reference names, if any."""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    repository = f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]
    match = IMAGE_COMPONENT.search(repository)
    return match["component"] if match else None


def unpinned(image: str) -> str | None:
    """Why an image reference is not pinned, or None."""
    tag = image_tag(image)
    if tag is None:
        return f"image {image!r} has no tag: pin a version (name:1.2.3) or a digest"
    if tag == "latest":
        return f"image {image!r} uses 'latest': pin a version or a digest"
    return None


# --- secrets -------------------------------------------------------------------------------

def literal_secret(name: str, value: str | None) -> str | None:
    """Why an environment variable's literal value looks like a secret, or None."""
    if value is not None and URL_CREDENTIALS.search(value):
        return f"{name} holds a URL with a password: take it from a secret"
    if SECRET_NAME.search(name) and value and not SECRET_FILE.match(value):
        return (f"{name} looks like a secret but holds a literal value: take it from a secret "
                "(or pass a path under /run/secrets/)")
    return None


# --- Kubernetes ----------------------------------------------------------------------------

def label_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Kubernetes label-selector semantics; an empty selector matches everything."""
    selector = selector or {}
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = set(expression.get("values") or [])
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


@dataclass(frozen=True)
class PodTemplate:
    """A pod as a workload will create it."""

    obj: str
    namespace: str
    labels: Mapping[str, str]
    spec: Mapping[str, Any]
    long_running: bool

    def containers(self, *, init: bool = True) -> Iterator[Mapping[str, Any]]:
        yield from self.spec.get("containers") or []
        if init:
            yield from self.spec.get("initContainers") or []
            yield from self.spec.get("ephemeralContainers") or []

    @property
    def components(self) -> frozenset[str]:
        found = (image_component(str(c.get("image", ""))) for c in self.containers(init=False))
        return frozenset(c for c in found if c)


def pod_templates(documents: Iterable[Document]) -> list[PodTemplate]:
    """Every pod template of the workloads among the documents."""
    templates = []
    for doc in documents:
        kind = doc.get("kind")
        if kind not in WORKLOADS:
            continue
        meta = doc.get("metadata") or {}
        obj, namespace = f"{kind}/{meta.get('name')}", meta.get("namespace", "default")
        if kind == "Pod":
            template: Mapping[str, Any] = doc
        elif kind == "CronJob":
            template = doc["spec"]["jobTemplate"]["spec"]["template"]
        else:
            template = doc["spec"]["template"]
        labels = (template.get("metadata") or {}).get("labels") or {}
        templates.append(PodTemplate(obj, namespace, labels, template.get("spec") or {},
                                     long_running=kind not in {"Job", "CronJob"}))
    return templates


def check_manifests(source: str, documents: list[Document]) -> list[Finding]:
    """Every rule on one rendered overlay."""
    findings: list[Finding] = []
    pods = pod_templates(documents)
    for pod in pods:
        findings += check_pod(source, pod)
    for doc in documents:
        if doc.get("kind") == "Secret" and (doc.get("data") or doc.get("stringData")):
            name = (doc.get("metadata") or {}).get("name")
            findings.append(Finding(source, f"Secret/{name}",
                                    "a Secret with values is part of the manifests: create it "
                                    "outside them and refer to it by name"))
    findings += check_node_ingress(source, pods, [
        doc for doc in documents if doc.get("kind") == "NetworkPolicy"])
    return findings


def check_pod(source: str, pod: PodTemplate) -> list[Finding]:
    """Pinned images, non-root users, no literal secret, real probes, a node's grace period."""
    findings = []
    pod_security = pod.spec.get("securityContext") or {}
    for container in pod.containers():
        where = f"{pod.obj} container {container.get('name')}"
        image = str(container.get("image", ""))
        if reason := unpinned(image):
            findings.append(Finding(source, where, reason))
        security = {**pod_security, **(container.get("securityContext") or {})}
        if security.get("runAsUser") == 0 or not (
                security.get("runAsNonRoot") is True or security.get("runAsUser")):
            findings.append(Finding(source, where, "may run as root: set runAsNonRoot: true "
                                                   "and a runAsUser other than 0"))
        findings += [Finding(source, where, reason) for reason in env_problems(container)]
        component = image_component(image)
        # A platform image's own process: not the copy of its models into another pod.
        if component and pod.long_running and container in (pod.spec.get("containers") or []):
            findings += [Finding(source, where, reason)
                         for reason in probe_problems(container, ENDPOINTS[component])]
            if component == "node" and (reason := grace_problem(pod.spec, container)):
                findings.append(Finding(source, pod.obj, reason))
    return findings


def grace_problem(spec: Mapping[str, Any], container: Mapping[str, Any]) -> str | None:
    """Why Kubernetes would kill a stopping node before it has drained, or None."""
    env = {e["name"]: e.get("value") for e in container.get("env") or []}
    try:
        needed = sum(float(env.get(name) or default) for name, default in NODE_STOP_SECONDS.items())
    except ValueError:
        return None
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if grace <= needed:
        return (f"terminationGracePeriodSeconds is {grace}, but a node needs {needed:g} s to stop "
                f"({' + '.join(NODE_STOP_SECONDS)}): raise it above {needed:g}")
    return None


def env_problems(container: Mapping[str, Any]) -> Iterator[str]:
    """Literal secrets, and $(VAR) references Kubernetes would leave as they are."""
    defined: set[str] = set()
    for entry in container.get("env") or []:
        name, value = entry["name"], entry.get("value")
        if "value" in entry:
            if reason := literal_secret(name, None if value is None else str(value)):
                yield reason
            # Kubernetes expands $(VAR) only for variables defined earlier in the list.
            for reference in re.findall(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(value)):
                if reference not in defined:
                    yield (f"{name} refers to $({reference}), which is not defined before it: "
                           "Kubernetes leaves it unexpanded")
        defined.add(name)


def probe_problems(container: Mapping[str, Any], endpoints: Endpoints) -> Iterator[str]:
    """Each of the three probes present, over HTTP, on the endpoint its kind may use."""
    ports = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
    for kind in PROBES:
        probe = container.get(kind)
        allowed = endpoints.for_probe(kind)
        if probe is None:
            yield f"has no {kind}: use httpGet {' or '.join(sorted(allowed))} on {endpoints.port}"
            continue
        http = probe.get("httpGet")
        if http is None:
            yield f"{kind} is not an HTTP probe: use httpGet {' or '.join(sorted(allowed))}"
            continue
        path, port = http.get("path"), http.get("port")
        port = ports.get(port, port) if isinstance(port, str) else port
        if path not in allowed:
            yield (f"{kind} checks {path!r}, which is not this image's {kind} endpoint: use "
                   f"{' or '.join(sorted(allowed))}")
        if port != endpoints.port:
            yield f"{kind} checks port {port}, but the endpoint is on {endpoints.port}"


def policy_ports_cover(ports: list[Mapping[str, Any]] | None, container_ports: Mapping[str, int],
                       port: int) -> bool:
    """Whether a NetworkPolicy rule's ports admit TCP traffic to a port."""
    if not ports:
        return True
    for entry in ports:
        if entry.get("protocol", "TCP") != "TCP":
            continue
        start = entry.get("port")
        if start is None:
            return True
        start = container_ports.get(start) if isinstance(start, str) else start
        if start is not None and start <= port <= entry.get("endPort", start):
            return True
    return False


def peer_problem(peer: Mapping[str, Any], namespace: str, pods: list[PodTemplate]) -> str | None:
    """Why a NetworkPolicy peer admits more than the control plane's and gateway's pods."""
    if "ipBlock" in peer:
        return f"admits addresses {peer['ipBlock'].get('cidr')}"
    if "namespaceSelector" in peer:
        return "admits pods of other namespaces (a namespaceSelector)"
    matched = [pod for pod in pods if pod.namespace == namespace
               and label_selector_matches(peer.get("podSelector"), pod.labels)]
    # A Job's pod (the migration) runs the control plane's image but is not the control plane.
    others = sorted(pod.obj for pod in matched if not pod.long_running
                    or not pod.components or not pod.components <= NODE_CLIENTS)
    if others:
        return f"admits {', '.join(others)}"
    if not matched:
        return "selects no pod of the manifests (it would admit any pod given those labels)"
    return None


def check_node_ingress(source: str, pods: list[PodTemplate],
                       policies: list[Document]) -> list[Finding]:
    """Every node pod is selected by an ingress policy that admits only the allowed clients."""
    findings = []
    for pod in pods:
        if "node" not in pod.components:
            continue
        container_ports = {p["name"]: p["containerPort"] for c in pod.containers(init=False)
                           for p in c.get("ports") or [] if "name" in p}
        selecting = [
            policy for policy in policies
            if (policy.get("metadata") or {}).get("namespace", "default") == pod.namespace
            and "Ingress" in (policy["spec"].get("policyTypes") or ["Ingress"])
            and label_selector_matches(policy["spec"].get("podSelector"), pod.labels)]
        if not selecting:
            findings.append(Finding(source, pod.obj, "no NetworkPolicy selects the node's pods: "
                                    "anything in the cluster reaches its repository API"))
        for policy in selecting:
            name = f"NetworkPolicy/{policy['metadata']['name']}"
            for rule in policy["spec"].get("ingress") or []:
                covered = [port for port in NODE_PORTS
                           if policy_ports_cover(rule.get("ports"), container_ports, port)]
                if not covered:
                    continue
                ports = "/".join(map(str, covered))
                peers = rule.get("from") or []
                if not peers:
                    findings.append(Finding(source, name, f"admits every source to {pod.obj}'s "
                                            f"ports {ports}: list the control plane and gateway"))
                for peer in peers:
                    if reason := peer_problem(peer, pod.namespace, pods):
                        findings.append(Finding(source, name, f"{reason} to {pod.obj}'s ports "
                                                f"{ports}: only control-plane and gateway pods "
                                                "may reach them"))
    return findings


# --- Dockerfiles ---------------------------------------------------------------------------

def dockerfile_instructions(text: str) -> Iterator[tuple[int, str, str]]:
    """(line, INSTRUCTION, arguments) with continuations joined, comments and heredoc bodies
    (``RUN <<EOF``) left out."""
    pending, start = "", 0
    heredoc: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if heredoc is not None:
            heredoc = None if stripped == heredoc else heredoc
            continue
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        instruction, _, arguments = (pending + stripped).partition(" ")
        pending = ""
        if opening := re.search(r"<<-?[\"']?(\w+)[\"']?", arguments):
            heredoc = opening[1]
        yield start, instruction.upper(), arguments.strip()


def substitute(value: str, variables: Mapping[str, str | None]) -> str | None:
    """Expand $VAR and ${VAR} (with :- defaults); None when a variable has no value."""
    missing = False

    def expand(match: re.Match[str]) -> str:
        nonlocal missing
        name, default = match["braced"] or match["plain"], match["default"]
        value = variables.get(name)
        if value is None and default is None:
            missing = True
            return ""
        return value if value is not None else default

    expanded = re.sub(r"\$\{(?P<braced>\w+)(?::?-(?P<default>[^}]*))?\}|\$(?P<plain>\w+)",
                      expand, value)
    return None if missing else expanded


def key_values(arguments: str) -> Iterator[tuple[str, str | None]]:
    """ENV/ARG arguments: KEY=value pairs, or the old ``ENV KEY value`` form."""
    words = shlex.split(arguments, posix=True)
    if words and "=" not in words[0] and len(words) > 1:
        yield words[0], " ".join(words[1:])
        return
    for word in words:
        key, sep, value = word.partition("=")
        yield key, value if sep else None


def check_dockerfile(source: str, text: str) -> list[Finding]:
    """Pinned bases, a non-root final stage, no secret in ENV/ARG, real HEALTHCHECK endpoints."""
    findings: list[Finding] = []
    global_args: dict[str, str | None] = {}
    stages: dict[str, str | None] = {}  # stage name -> its user
    user: str | None = None
    stage = ""
    component = next((part for part in Path(source).parts if part in ENDPOINTS), None)
    for line, instruction, arguments in dockerfile_instructions(text):
        where = f"line {line} {instruction}"
        if instruction == "ARG":
            for key, value in key_values(arguments):
                if SECRET_NAME.search(key):
                    findings.append(Finding(source, where, f"build argument {key} looks like a "
                                            "secret: build arguments stay in the image's history; "
                                            "use a secret mount (RUN --mount=type=secret)"))
                if not stages:
                    global_args[key] = value
        elif instruction == "FROM":
            if stage:
                stages[stage] = user
            words = [w for w in arguments.split() if not w.startswith("--")]
            reference = substitute(words[0], global_args)
            stage = words[2] if len(words) >= 3 and words[1].upper() == "AS" else f"#{line}"
            if reference is None:
                findings.append(Finding(source, where, f"{words[0]} uses an ARG without a "
                                        "default: give it a pinned image as its default"))
                user = None
            elif reference in stages:
                user = stages[reference]
            else:
                user = None
                if reference != "scratch" and (reason := unpinned(reference)):
                    findings.append(Finding(source, where, reason))
        elif instruction == "USER":
            user = arguments.split(":", 1)[0]
        elif instruction == "ENV":
            for key, value in key_values(arguments):
                if reason := literal_secret(key, value):
                    findings.append(Finding(source, where, reason))
        elif instruction in ("COPY", "ADD"):
            sources = [w for w in shlex.split(arguments) if not w.startswith("--")][:-1]
            for name in (s for s in sources if SECRET_FILE_NAME.search(s)):
                findings.append(Finding(source, where, f"copies {name!r}, which looks like a "
                                        "secret, into the image: mount it at run time instead"))
        elif instruction == "HEALTHCHECK" and component:
            findings += [Finding(source, where, reason)
                         for reason in healthcheck_problems(arguments, ENDPOINTS[component])]
    # docker/base/ holds base images (stand-ins for official ones): what is built FROM them sets
    # its own USER, and one that runs by itself (postgres, redis) is held to user: in Compose.
    if stage and user in (None, "", "root", "0") and BASE_IMAGES not in Path(source).parents:
        findings.append(Finding(source, "final stage", "runs as root: end with USER llm "
                                "(uid 10001) or another non-root user"))
    return findings


def healthcheck_problems(command: str, endpoints: Endpoints) -> Iterator[str]:
    """A healthcheck's URLs must be the image's real endpoints."""
    if command.strip().upper() == "NONE":
        return
    urls = list(URL.finditer(command))
    if not urls:
        yield (f"the healthcheck calls no URL: call one of {', '.join(sorted(endpoints.any))} "
               f"on port {endpoints.port}")
    for url in urls:
        if url["path"] not in endpoints.any:
            yield (f"the healthcheck calls {url['path']!r}, not a real endpoint of the image: "
                   f"use one of {', '.join(sorted(endpoints.any))}")
        if url["port"] and int(url["port"]) != endpoints.port:
            yield f"the healthcheck calls port {url['port']}, but the endpoint is on " \
                  f"{endpoints.port}"


# --- Compose -------------------------------------------------------------------------------

def check_compose(source: str, document: Document) -> list[Finding]:
    """Pinned images, non-root services, secrets from ``secrets:``, real healthcheck URLs."""
    findings = []
    for name, service in (document.get("services") or {}).items():
        where = f"service {name}"
        image = service.get("image")
        resolved = substitute(image, {}) if image else None
        if image and resolved is None:
            findings.append(Finding(source, where, f"image {image!r} needs a variable without a "
                                    "default: give it a pinned default"))
        elif resolved and (reason := unpinned(resolved)):
            findings.append(Finding(source, where, reason))
        component = image_component(resolved) if resolved else None
        ours = component is not None or "build" in service
        user = str(service.get("user", "")).split(":", 1)[0]
        if user in ("root", "0") or (not user and not ours):
            findings.append(Finding(source, where, "may run as root: set user: to a non-root "
                                    "uid:gid (the platform's images set USER themselves)"))
        environment = service.get("environment") or {}
        if isinstance(environment, list):
            environment = dict(
                (entry.split("=", 1) + [None])[:2] if "=" in entry else (entry, None)
                for entry in environment)
        for key, value in environment.items():
            text = None if value is None else str(value)
            if SECRET_NAME.search(key) and (text is None or not SECRET_FILE.match(text)):
                findings.append(Finding(source, where, f"{key} looks like a secret but comes "
                                        "from the environment: declare it under secrets: and "
                                        "pass its path (/run/secrets/NAME)"))
            elif reason := literal_secret(key, text):
                findings.append(Finding(source, where, reason))
        healthcheck = service.get("healthcheck") or {}
        test = healthcheck.get("test")
        if component and test and not healthcheck.get("disable"):
            command = test if isinstance(test, str) else " ".join(map(str, test))
            findings += [Finding(source, where, reason)
                         for reason in healthcheck_problems(command, ENDPOINTS[component])]
    return findings


# --- the command ---------------------------------------------------------------------------

def render(overlay: Path) -> list[Document]:
    """The overlay's manifests as ``kubectl kustomize`` builds them."""
    result = subprocess.run(["kubectl", "kustomize", str(overlay)], capture_output=True,
                            text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {overlay} failed:\n{result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def overlays(root: Path) -> list[Path]:
    """The directories under docker/k8s/overlays/ that hold a kustomization."""
    return sorted(p.parent for p in (root / "docker/k8s/overlays").glob("*/kustomization.yaml"))


def dockerfiles(root: Path) -> list[Path]:
    """Dockerfile, Dockerfile.*, *.Dockerfile under docker/ (what run.sh gives hadolint)."""
    return sorted(path for path in (root / "docker").rglob("*") if path.is_file() and (
        path.name.startswith("Dockerfile") or path.name.endswith(".Dockerfile")))


def check_repository(root: Path) -> tuple[list[Finding], list[str]]:
    """Every rule on everything under docker/; also a line per thing checked or skipped."""
    findings: list[Finding] = []
    report = []
    for overlay in overlays(root):
        source = str(overlay.relative_to(root))
        findings += check_manifests(source, render(overlay))
        report.append(f"checked {source} (rendered)")
    for dockerfile in dockerfiles(root):
        source = str(dockerfile.relative_to(root))
        findings += check_dockerfile(source, dockerfile.read_text())
        report.append(f"checked {source}")
    compose = root / "docker/compose.yaml"
    if compose.exists():
        findings += check_compose("docker/compose.yaml", yaml.safe_load(compose.read_text()))
        report.append("checked docker/compose.yaml")
    else:
        report.append("skipped docker/compose.yaml: the file does not exist")
    return findings, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2],
                        help="the repository's root (default: the one holding this file)")
    root = parser.parse_args(argv).root.resolve()
    findings, report = check_repository(root)
    for line in report:
        print(f"policy: {line}")
    for finding in findings:
        print(f"policy: FAIL {finding}")
    print(f"policy: {len(findings)} problem(s)" if findings else "policy: all rules pass")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
