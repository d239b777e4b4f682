"""Where a version's weights come from: a local path under an allowed root, ``hf://`` or ``s3://``."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from control_plane.errors import InvalidSource

_HF = re.compile(r"^hf://[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}(@[\w./-]{1,128})?$")
_S3 = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[\w!*'()./-]{0,1000})?$")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class CheckedSource:
    uri: str
    checksum: str | None


def check_source(source: str, roots: Sequence[Path]) -> CheckedSource:
    """Accept ``source`` if it is one of the allowed kinds, with a checksum when it is local."""
    if source.startswith(("hf://", "s3://")):
        pattern = _HF if source.startswith("hf://") else _S3
        # '..' would let a later fetch step climb out of its download directory.
        if not pattern.match(source) or ".." in source.split("/"):
            raise InvalidSource(f"'{source}' is not a valid {source[:5]} address "
                                "(expected hf://<org>/<repo>[@<revision>] or s3://<bucket>/<key>)")
        return CheckedSource(uri=source, checksum=None)
    if not source.startswith("/"):
        raise InvalidSource(f"source '{source}' is not allowed: use an absolute local path under "
                            f"{_roots_text(roots)}, an hf:// or an s3:// address")
    resolved = resolve_local(source, roots)
    return CheckedSource(uri=str(resolved), checksum=local_checksum(resolved))


def resolve_local(source: str, roots: Sequence[Path]) -> Path:
    """The real path of local ``source``, which must exist under one of ``roots``
    (``InvalidSource`` saying which rule it broke)."""
    try:
        # resolve() follows symlinks, so a link inside a root cannot point outside it.
        resolved = Path(source).resolve(strict=True)
    except (OSError, RuntimeError, ValueError) as exc:  # ValueError: a NUL in the path
        raise InvalidSource(f"local source '{source}' does not exist or cannot be read") from exc
    if not any(resolved.is_relative_to(root.resolve()) for root in roots):
        raise InvalidSource(f"local source '{source}' is outside the allowed roots "
                            f"{_roots_text(roots)} (setting LLMCP_SOURCE_ROOTS)")
    return resolved


def local_checksum(path: Path) -> str:
    """sha256 over every file's relative path and content, in a stable order."""
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        digest.update(str(file.relative_to(path) if file != path else file.name).encode())
        digest.update(b"\0")
        try:
            with file.open("rb") as handle:
                while chunk := handle.read(_CHUNK):
                    digest.update(chunk)
        except OSError as exc:
            raise InvalidSource(
                f"cannot read '{file}' of the source: {exc.strerror}; the control plane (and "
                "the nodes, which load it) must be able to read every file of the model "
                "(e.g. chmod -R a+rX on its directory)") from exc
        digest.update(b"\0")
    return digest.hexdigest()


def _roots_text(roots: Sequence[Path]) -> str:
    return ", ".join(str(root) for root in roots) or "(none configured)"
