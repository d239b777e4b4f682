"""Reading a version manifest file (YAML or JSON) and checking it locally, before any request:
a bad manifest ends the command with exit 2 and one line per problem, each naming its field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from control_plane.llmctl.errors import LlmctlError, usage_error
from control_plane.llmctl.exit_codes import ExitCode

if TYPE_CHECKING:
    from control_plane.promotions.manifest import VersionManifest

T = TypeVar("T", bound=BaseModel)


def field_path(location: tuple[int | str, ...]) -> str:
    """``('gates', 'smoke', 0, 'prompt')`` as ``gates.smoke[0].prompt``."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(the manifest)"


def _parse(path: Path, text: str) -> Any:
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise usage_error(f"manifest {path} is not valid JSON: {exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise usage_error(f"manifest {path} is not valid YAML: {' '.join(str(exc).split())}"
                          ) from None


def _read(path: Path, what: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise usage_error(f"cannot read {what} {path}: {exc}") from None
    data = _parse(path, text)
    if not isinstance(data, dict):
        raise usage_error(f"{what} {path} must be a mapping of fields, not "
                          f"{type(data).__name__}; see 'llmctl schema manifest'")
    return data


def _validated(schema: type[T], data: Any, path: Path, what: str) -> T:
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        problems = [f"{field_path(tuple(error['loc']))}: {error['msg']}"
                    for error in exc.errors(include_url=False)]
        raise LlmctlError(ExitCode.USAGE, "InvalidManifest",
                          f"{what} {path} is not valid ({len(problems)} problem"
                          f"{'s' if len(problems) != 1 else ''}): " + "; ".join(problems)
                          + "; see 'llmctl schema manifest'",
                          {"problems": problems}) from None


def load_manifest(path: Path, model: str) -> VersionManifest:
    """The manifest in ``path``, checked against the schema and against ``model``."""
    # Imported here: the manifest's model brings the server's registry (SQLAlchemy, FastAPI),
    # a second of start-up that only the commands reading a manifest should pay.
    from control_plane.promotions.manifest import VersionManifest

    manifest = _validated(VersionManifest, _read(path, "manifest"), path, "manifest")
    if manifest.model is not None and manifest.model != model:
        raise usage_error(f"manifest {path} is for model '{manifest.model}', not '{model}'; "
                          "fix its 'model' field or the model named on the command line")
    return manifest


def load_gates(path: Path) -> dict[str, Any]:
    """A gates file (a manifest's ``gates`` on their own: smoke, compare), checked, as JSON."""
    from control_plane.registry.gates import Gates

    gates = _validated(Gates, _read(path, "gates file"), path, "gates file")
    return gates.model_dump(mode="json", exclude_unset=True)


def request_fields(manifest: VersionManifest) -> dict[str, Any]:
    """What the manifest says, as JSON, without ``model`` (the URL names it) and without the
    defaults it left out, so the server records the manifest as written."""
    return manifest.model_dump(mode="json", exclude_unset=True, exclude={"model"})
