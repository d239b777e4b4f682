"""Where the project lives and where it keeps what it downloads and builds (``.cache``, or
``LLM_PLATFORM_CACHE``). A leaf: settings and the Triton runtime both read it."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CACHE_DIR = Path(os.environ.get("LLM_PLATFORM_CACHE", PROJECT_ROOT / ".cache"))
