"""Validating a version: the operation that moves it from registered to validated.

It reads the source again (which can take minutes for a large local model), so it runs as an
operation rather than inside a request. A local source must still match the checksum taken at
registration and look like something vLLM can serve; a remote source is checked by the node that
fetches it, and the result says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from control_plane.auth import audit
from control_plane.auth.scopes import Actor, Scope
from control_plane.db import transaction, utcnow
from control_plane.errors import InvalidStateTransition, PreconditionFailed, ValidationFailed
from control_plane.operations import service as operations
from control_plane.operations.orm import Operation
from control_plane.operations.runner import OperationContext
from control_plane.registry import vllm_catalogue
from control_plane.registry.orm import VersionState
from control_plane.registry.repository import VersionRepository
from control_plane.registry.schemas import VersionOut
from control_plane.registry.service import get_version
from control_plane.registry.sources import check_source

KIND = "version.validate"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")


def vllm_architectures() -> frozenset[str]:
    """The model architectures vLLM can run (the installed vLLM, or the catalogue)."""
    return frozenset(vllm_catalogue.catalogue()["architectures"])


@dataclass
class Findings:
    """What validation checked and what it could not check, for the operation's result."""

    checked: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def as_result(self) -> dict[str, Any]:
        return {"checked": self.checked, "skipped": self.skipped}


def start(session: Session, actor: Actor, model_name: str, number: int) -> Operation:
    """Start validating a registered version; returns the pending operation."""
    version = get_version(session, model_name, number)
    if version.state != VersionState.REGISTERED:
        raise InvalidStateTransition(f"version {number} of '{model_name}' is {version.state}; "
                                     "only a registered version can be validated")
    return operations.start(session, actor, KIND, "version", f"{model_name}/{number}",
                            {"model": model_name, "number": number})


def inspect_local(path: Path, checksum: str | None, roots: Sequence[Path],
                  engine_args: Mapping[str, Any], architectures: Callable[[], frozenset[str]]
                  ) -> Findings:
    """Every check of a local source; problems are collected, not raised one at a time."""
    findings = Findings()
    current = check_source(str(path), roots)  # still there, still under a root
    if checksum is not None and current.checksum != checksum:
        findings.problems.append(f"the files changed since registration (sha256 {current.checksum}"
                                 f", registered {checksum}); register a new version")
    else:
        findings.checked.append("checksum matches registration")
    if not path.is_dir():
        findings.problems.append(f"{path} is a file; vLLM loads a model directory")
        return findings
    config = _read_config(path / "config.json", findings)
    if config is not None:
        _check_architecture(config, architectures(), findings)
        _check_context_length(config, engine_args, findings)
    weights = sorted(p.name for p in path.iterdir() if p.name.endswith(WEIGHT_SUFFIXES))
    if weights:
        findings.checked.append(f"weights: {', '.join(weights[:5])}"
                                f"{' …' if len(weights) > 5 else ''}")
    else:
        findings.problems.append(f"no weight files ({', '.join(WEIGHT_SUFFIXES)}) in {path}")
    if "tokenizer" in engine_args or engine_args.get("skip_tokenizer_init"):
        findings.skipped.append("tokenizer: set by engine_args")
    elif any((path / name).is_file() for name in TOKENIZER_FILES):
        findings.checked.append("tokenizer files present")
    else:
        findings.problems.append(f"no tokenizer ({', '.join(TOKENIZER_FILES)}) in {path}; add one "
                                 "or set engine_args.tokenizer")
    return findings


def _read_config(path: Path, findings: Findings) -> dict[str, Any] | None:
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        findings.problems.append(f"{path} is missing: vLLM needs the model's config.json")
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        findings.problems.append(f"{path} cannot be read as JSON ({exc})")
        return None
    if not isinstance(config, dict):
        findings.problems.append(f"{path} is not a JSON object")
        return None
    return config


def _check_architecture(config: dict[str, Any], supported: frozenset[str],
                        findings: Findings) -> None:
    declared = config.get("architectures")
    if not isinstance(declared, list) or not declared:
        findings.problems.append("config.json names no architectures")
        return
    unknown = [name for name in declared if name not in supported]
    if unknown:
        findings.problems.append(f"architecture(s) {unknown} are not supported by the installed "
                                 "vLLM")
    else:
        findings.checked.append(f"architecture {', '.join(declared)} is supported by vLLM")


def _check_context_length(config: dict[str, Any], engine_args: Mapping[str, Any],
                          findings: Findings) -> None:
    limit = config.get("max_position_embeddings")
    wanted = engine_args.get("max_model_len")
    if isinstance(limit, int) and isinstance(wanted, int):
        if wanted > limit:
            findings.problems.append(f"engine_args.max_model_len {wanted} exceeds the model's "
                                     f"max_position_embeddings {limit}")
        else:
            findings.checked.append(f"max_model_len {wanted} <= max_position_embeddings {limit}")


def make_work(source_roots: Sequence[Path],
              architectures: Callable[[], frozenset[str]] = vllm_architectures
              ) -> Callable[[OperationContext], None]:
    """The operation's work, bound to the configured source roots."""

    def work(context: OperationContext) -> None:
        model_name, number = context.arguments["model"], context.arguments["number"]
        with transaction(context.session_factory) as session:
            version = get_version(session, model_name, number)
            source, checksum = version.source, version.checksum
            engine_args = dict(version.engine_args)
        if source.startswith(("hf://", "s3://")):
            findings = Findings(checked=["address syntax"], skipped=[
                "files: a remote source is checked by the node that fetches it"])
        else:
            findings = inspect_local(Path(source), checksum, source_roots, engine_args,
                                     architectures)
        if findings.problems:
            raise ValidationFailed(f"version {number} of '{model_name}' is not valid: "
                                   + "; ".join(findings.problems))
        with transaction(context.session_factory) as session:
            _mark_validated(session, context, model_name, number, findings)

    return work


def _mark_validated(session: Session, context: OperationContext, model_name: str, number: int,
                    findings: Findings) -> None:
    version = get_version(session, model_name, number)
    if version.state != VersionState.REGISTERED:
        raise InvalidStateTransition(f"version {number} of '{model_name}' became {version.state} "
                                     "while it was being validated")
    before = VersionOut.of(version).model_dump(mode="json")
    if not VersionRepository(session).change_state(version, VersionState.REGISTERED,
                                                   VersionState.VALIDATED, utcnow()):
        raise PreconditionFailed(f"version {number} of '{model_name}' changed while it was being "
                                 "validated")
    # The change is the caller's, made later on their behalf: the audit names them and their
    # request, as if they had made it themselves.
    actor = Actor(name=context.created_by, scope=Scope.WRITE, request_id=context.request_id)
    audit.record(session, actor, "version.update", "version", f"{model_name}/{number}",
                 before=before, after=VersionOut.of(version).model_dump(mode="json"))
    if not operations.succeed(session, context.operation_id, findings.as_result()):
        # Failed as interrupted meanwhile: roll the state change back with it.
        raise PreconditionFailed(f"operation {context.operation_id} was ended elsewhere")
