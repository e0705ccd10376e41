"""Shared test helpers: where the examples live, and writing specs into tmp folders."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture
def write_spec(tmp_path: Path):
    """Write a spec (dict) as tritonpkg.yaml in its own folder and return the path."""

    def _write(data: dict, folder: str = "spec", extra_files: dict[str, str] | None = None) -> Path:
        d = tmp_path / folder
        d.mkdir(parents=True, exist_ok=True)
        for name, text in (extra_files or {}).items():
            (d / name).write_text(text)
        path = d / "tritonpkg.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return _write
