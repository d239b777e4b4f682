"""Labels and free text: the patterns schemas check them with, and the label filter's parser.

FastAPI's parameter types for them live in ``api_params`` (the API layer), so schemas and
services that use these import no web framework."""

from __future__ import annotations

import re

from control_plane.errors import InvalidRequest

# PostgreSQL can neither store nor compare a NUL character (SQLite can): free text refuses it, so
# both backends answer 422 instead of one of them failing with a 500.
NO_NUL_PATTERN = r"^[^\x00]*$"
# Label keys are also JSON paths in the label filter; a small alphabet keeps that path literal.
LABEL_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$"
_LABEL_KEY = re.compile(LABEL_KEY_PATTERN)


def parse_label_filter(pairs: list[str]) -> dict[str, str]:
    """``["team=nlp", "env=prod"]`` as a dict; refuses entries without ``=``."""
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidRequest(f"label filter '{pair}' must look like key=value")
        # The key becomes a JSON path: one outside the label-key alphabet broke the query (a 503
        # on SQLite, a 500 on PostgreSQL) where it can only be a mistake.
        if not _LABEL_KEY.match(key):
            raise InvalidRequest(f"label filter '{pair}': '{key}' is not a label key (letters, "
                                 "digits, '.', '_', '/' or '-', at most 63)")
        if "\x00" in value:
            raise InvalidRequest(f"label filter '{pair}': the value contains a NUL character")
        labels[key] = value
    return labels
