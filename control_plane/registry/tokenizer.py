"""A version's tokenizer files, served to gateways (``GET …/versions/{n}/tokenizer``) so that they
count a prompt's tokens as the backend will, rather than bound them by its bytes.

The files come from the version's local source directory, or from the local directory that
``engine_args.tokenizer`` names (vLLM's own override, which the backend then loads). They are read
after the transaction that read the version has ended: a tokenizer.json is megabytes, and no
database connection should wait on a disk. A remote source's files are on the nodes that fetch
them, not here: such a version has no tokenizer to serve, and the error says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction
from control_plane.errors import InvalidSource, TokenizerUnavailable
from control_plane.registry.service import get_version
from control_plane.registry.sources import resolve_local

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
# Where transformers saves a tokenizer's chat template (since 4.43); it wins over the config's.
CHAT_TEMPLATE_FILE = "chat_template.jinja"
# The named special tokens transformers hands a chat template (SPECIAL_TOKENS_ATTRIBUTES).
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                  "mask_token")
# vLLM's tokenizer modes that load tokenizer.json through transformers; "mistral", "slow" and
# "custom" tokenize with something else, whose counts tokenizer.json need not reproduce.
HF_TOKENIZER_MODES = frozenset({"auto", "hf"})


@dataclass(frozen=True)
class TokenizerFiles:
    """What counting a prompt as the backend does needs from a tokenizer directory."""

    tokenizer_json: str
    chat_template: str | None
    special_tokens: dict[str, str]


@dataclass(frozen=True)
class VersionTokenizer:
    model: str
    number: int
    checksum: str | None
    files: TokenizerFiles


def read_version_tokenizer(factory: sessionmaker[Session], model_name: str, number: int,
                           roots: Sequence[Path], max_bytes: int) -> VersionTokenizer:
    """The version's tokenizer files; ``TokenizerUnavailable`` saying why there are none to
    serve. The version is read in a short transaction of its own, the files after it."""
    with transaction(factory, read_only=True) as session:
        version = get_version(session, model_name, number)
        source, checksum = version.source, version.checksum
        engine_args = dict(version.engine_args)
    try:
        directory = tokenizer_directory(source, engine_args, roots)
        files = read_tokenizer_files(directory, roots, max_bytes)
    except ValueError as exc:
        raise TokenizerUnavailable(model_name, number, str(exc)) from None
    return VersionTokenizer(model_name, number, checksum, files)


def tokenizer_directory(source: str, engine_args: Mapping[str, Any], roots: Sequence[Path]
                        ) -> Path:
    """The local directory the backend loads the version's tokenizer from; ``ValueError`` when
    it is not one the control plane can read."""
    mode = engine_args.get("tokenizer_mode", "auto")
    if mode not in HF_TOKENIZER_MODES:
        raise ValueError(f"engine_args.tokenizer_mode is {mode!r}: the backend does not count "
                         f"with {TOKENIZER_FILE}")
    named = engine_args.get("tokenizer")
    if named is not None:
        if not isinstance(named, str) or not named.startswith("/"):
            raise ValueError(f"engine_args.tokenizer {named!r} is not a local directory (the "
                             "nodes fetch it)")
        where = named
    elif source.startswith(("hf://", "s3://")):
        raise ValueError(f"its source {source} is remote: its files are on the nodes that "
                         "fetch them, not on the control plane")
    else:
        where = source
    try:
        directory = resolve_local(where, roots)
    except InvalidSource as exc:
        raise ValueError(exc.message) from None
    if not directory.is_dir():
        raise ValueError(f"{directory} is a file, not a model directory")
    return directory


def read_tokenizer_files(directory: Path, roots: Sequence[Path], max_bytes: int
                         ) -> TokenizerFiles:
    """tokenizer.json, and from the chat template file or tokenizer_config.json the chat
    template and special tokens; ``ValueError`` naming the file that is missing or unreadable."""
    tokenizer_json = _read_text(directory / TOKENIZER_FILE, roots, max_bytes)
    if tokenizer_json is None:
        raise ValueError(f"{directory} has no {TOKENIZER_FILE} (a tokenizer the gateway can "
                         "load without transformers)")
    config_text = _read_text(directory / CONFIG_FILE, roots, max_bytes)
    config: dict[str, Any] = {}
    if config_text is not None:
        try:
            loaded = json.loads(config_text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{directory / CONFIG_FILE} is not valid JSON ({exc})") from None
        if not isinstance(loaded, dict):
            raise ValueError(f"{directory / CONFIG_FILE} is not a JSON object")
        config = loaded
    template = _read_text(directory / CHAT_TEMPLATE_FILE, roots, max_bytes)
    return TokenizerFiles(
        tokenizer_json=tokenizer_json,
        chat_template=template if template is not None else _config_template(config),
        special_tokens={name: token for name in SPECIAL_TOKENS
                        if (token := _token_text(config.get(name))) is not None})


def _read_text(path: Path, roots: Sequence[Path], max_bytes: int) -> str | None:
    """The file's text, None when there is no such file."""
    if not path.is_file():
        return None
    try:
        # A link inside the directory must not lead outside the roots.
        resolve_local(str(path), roots)
    except InvalidSource as exc:
        raise ValueError(exc.message) from None
    try:
        with path.open("rb") as handle:
            # One byte over the limit is enough to know, whatever the file's size says.
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise ValueError(f"{path} cannot be read ({exc.strerror})") from None
    if len(data) > max_bytes:
        raise ValueError(f"{path} is larger than the {max_bytes} bytes the control plane serves "
                         "(setting LLMCP_TOKENIZER_MAX_BYTES)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text") from None


def _config_template(config: Mapping[str, Any]) -> str | None:
    template = config.get("chat_template")
    if isinstance(template, str):
        return template
    if isinstance(template, list):
        # Named templates, as transformers saves several: it renders chat with "default".
        named = {entry.get("name"): entry.get("template") for entry in template
                 if isinstance(entry, dict)}
        default = named.get("default")
        return default if isinstance(default, str) else None
    return None


def _token_text(value: Any) -> str | None:
    # A special token is saved as its text or as an AddedToken object with its "content".
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None
