"""vLLM engine arguments of a version, checked against vLLM's own ``AsyncEngineArgs`` fields."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from control_plane.errors import UnknownEngineArgument
from control_plane.registry import vllm_catalogue

# Set by the control plane from the version's source; a second value would only disagree with it.
RESERVED = frozenset({"model"})


def vllm_engine_arg_names() -> frozenset[str]:
    """The field names of vLLM's ``AsyncEngineArgs`` (the installed vLLM, or the catalogue)."""
    return frozenset(vllm_catalogue.catalogue()["engine_args"])


def check_engine_args(args: Mapping[str, Any], known: Iterable[str] | None = None) -> None:
    """Refuse keys vLLM does not know (naming the close matches) and keys the source sets."""
    names = frozenset(known) if known is not None else vllm_engine_arg_names()
    problems = []
    for key in sorted(args):
        if key in RESERVED:
            problems.append(f"'{key}' is set from the version's source; remove it")
        elif key not in names:
            matches = difflib.get_close_matches(key, sorted(names), n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(repr(m) for m in matches)}?" if matches else \
                "see vLLM's EngineArgs for the accepted names"
            problems.append(f"'{key}' is not a vLLM engine argument; {hint}")
    if problems:
        raise UnknownEngineArgument("; ".join(problems))
