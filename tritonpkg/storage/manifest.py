"""The manifest of a materialization: every file's size, sha256 and source identity (ETag, version id),
and where it came from. Written inside the staged tree, then READY, then the tree is renamed into place."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from tritonpkg import boundedio
from tritonpkg.safepath import UnsafePathError, check_name
from tritonpkg.storage.layout import MANIFEST, READY
from tritonpkg.storage.objects import RemoteFile

FORMAT = 1
MAX_BYTES = 256 << 20  # a manifest of a million files is ~200 MB; a larger one is not read


def build(source: str, model: str, revision: str, files: list[RemoteFile], sha256: dict[str, str],
          versions: dict[str, str | None]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "source": source,
        "model": model,
        "revision": revision,
        "materialized_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "total_bytes": sum(f.size for f in files),
        "files": {f.path: {"size": f.size, "sha256": sha256[f.path], "etag": f.etag,
                           "version_id": versions.get(f.path) or f.version_id, "key": f.key}
                  for f in sorted(files, key=lambda f: f.path)},
    }


def write(tree: Path, manifest: dict[str, Any]) -> None:
    """Manifest first, READY last, both fsynced."""
    for name, data in ((MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n"),
                       (READY, manifest["materialized_at"] + "\n")):
        with open(tree / name, "w") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())


def read_ready(directory: Path) -> dict[str, Any] | None:
    """The manifest of a complete materialization, or None when `directory` is not one."""
    if not (directory / READY).is_file():
        return None
    try:
        data = json.loads(boundedio.read_file(directory / MANIFEST, MAX_BYTES))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("files", {}), dict):
        return None
    try:  # entries name files under `directory`: the one path rule, as for a source's keys
        for name, entry in data.get("files", {}).items():
            check_name(name, source=directory / MANIFEST, what="manifest entry")
            if not isinstance(entry, dict):
                return None
    except UnsafePathError:
        return None
    return data


def matches(manifest: dict[str, Any], files: list[RemoteFile], directory: Path) -> bool:
    """Whether a READY materialization holds exactly this listing (identities and on-disk sizes)."""
    recorded = manifest.get("files", {})
    if set(recorded) != {f.path for f in files}:
        return False
    for f in files:
        entry = recorded[f.path]
        if entry.get("size") != f.size or entry.get("etag") != f.etag:
            return False
        if f.version_id and entry.get("version_id") != f.version_id:
            return False
        try:
            if (directory / f.path).stat().st_size != f.size:
                return False
        except FileNotFoundError:
            return False
    return True
