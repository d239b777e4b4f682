"""vLLM's logprobs in the JSON shape of the stock backend's ``logprobs`` output.

One list entry per token, each a map from token id to ``{"logprob", "rank", "decoded_token"}``:
the sampled token and the most likely ones (``sampling_parameters.logprobs`` of them). A prompt's
first token has no logprob: its entry is null.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

# What OpenAI's API (and vLLM's server) writes for an impossible token: JSON has no -Infinity.
IMPOSSIBLE_LOGPROB = -9999.0
NOT_REQUESTED = "null"


def _finite(value: float) -> float:
    return value if math.isfinite(value) else IMPOSSIBLE_LOGPROB


def _entry(position: Mapping[int, Any] | None) -> dict[str, dict[str, Any]] | None:
    if position is None:
        return None
    return {
        str(token_id): {"logprob": _finite(float(lp.logprob)), "rank": lp.rank,
                        "decoded_token": lp.decoded_token}
        for token_id, lp in position.items()
    }


def logprobs_json(positions: Sequence[Mapping[int, Any] | None] | None) -> str:
    """``positions`` (vLLM's per-token ``{token_id: Logprob}``) as the stock JSON; ``null`` when
    vLLM computed none."""
    if positions is None:
        return NOT_REQUESTED
    return json.dumps([_entry(position) for position in positions])


def cumulative(value: float | None) -> float:
    """The sequence's summed logprob; NaN while vLLM has none to give."""
    return math.nan if value is None else _finite(float(value))
