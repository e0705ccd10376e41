"""Checked-in snapshots of vLLM's AsyncEngineArgs fields, one JSON file per vLLM version.

`validate` checks model.json against the live AsyncEngineArgs when vLLM is importable and against
these files otherwise; `snapshot.py` regenerates one from an installed vLLM."""

from __future__ import annotations

import json
from pathlib import Path

SNAPSHOT_DIR = Path(__file__).resolve().parent


def snapshot_path(vllm_version: str) -> Path:
    return SNAPSHOT_DIR / f"vllm-{vllm_version}.json"


def load_snapshot(vllm_version: str) -> dict | None:
    """The snapshot for exactly `vllm_version`, or None when none is checked in."""
    path = snapshot_path(vllm_version)
    return json.loads(path.read_text()) if path.is_file() else None
