"""vLLM engine arguments of a version, checked against vLLM's own ``AsyncEngineArgs`` fields."""

from __future__ import annotations

import difflib
import functools
import json
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from control_plane.errors import UnknownEngineArgument

# Set by the control plane from the version's source; a second value would only disagree with it.
RESERVED = frozenset({"model"})


# Read in a child interpreter, not imported: vLLM pulls in torch, whose ~500,000 objects would stay
# in the control plane for good, and every full garbage collection would scan them (~0.4 s, held
# under the GIL: a latency spike for every request in flight, every few seconds under load).
_READ_FIELD_NAMES = ("import json; from vllm import AsyncEngineArgs; "
                     "print(json.dumps(sorted(AsyncEngineArgs.__dataclass_fields__)))")
# One child at a time: concurrent first registrations wait for its answer instead of each
# starting their own.
_read_lock = threading.Lock()


def vllm_engine_arg_names() -> frozenset[str]:
    """The field names of the installed vLLM's ``AsyncEngineArgs``."""
    with _read_lock:
        return _read_vllm_engine_arg_names()


@functools.cache
def _read_vllm_engine_arg_names() -> frozenset[str]:
    done = subprocess.run([sys.executable, "-c", _READ_FIELD_NAMES], capture_output=True,
                          text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"cannot read vLLM's engine arguments with {sys.executable} (is vLLM "
                           f"installed there?): {done.stderr.strip()[-1000:]}")
    names: list[str] = json.loads(done.stdout.splitlines()[-1])
    return frozenset(names)


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
