"""Plugin entries of tritonpkg.lock.json: written by `package`, read back by start-up and `validate`.

One entry per declared plugin: distribution name and version, the bundled wheel and its sha256, the
entry-point group the spec asked for and every entry point the wheel registers (from its metadata)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tritonpkg.plugins.errors import PluginError
from tritonpkg.plugins.wheel import WheelInfo


class PluginRecord(BaseModel):
    name: str
    version: str | None = None
    wheel: str | None = Field(default=None, description="file name under the package's wheels/")
    sha256: str | None = None
    entry_point_group: str
    entry_points: dict[str, dict[str, str]] = Field(default_factory=dict)
    requires_dist: list[str] = Field(default_factory=list)


def record_for(name: str, entry_point_group: str, info: WheelInfo | None) -> PluginRecord:
    if info is None:  # expected in the runtime environment already
        return PluginRecord(name=name, entry_point_group=entry_point_group)
    return PluginRecord(name=info.name, version=info.version, wheel=info.wheel, sha256=info.sha256,
                        entry_point_group=entry_point_group, entry_points=info.entry_points,
                        requires_dist=info.requires_dist)


def recorded_plugins(lock: Mapping[str, Any] | Path) -> list[PluginRecord]:
    """Every plugin recorded for any model version of the lock, once per wheel (or name)."""
    source = lock if isinstance(lock, Path) else None
    if isinstance(lock, Path):
        try:
            data: Mapping[str, Any] = json.loads(lock.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise PluginError(f"cannot read the lock: {exc}", file=lock, expected="a tritonpkg.lock.json") from exc
    else:
        data = lock
    found: dict[str, PluginRecord] = {}
    for model, entry in sorted(data.get("models", {}).items()):
        for version, ventry in sorted(entry.get("versions", {}).items()):
            for i, raw in enumerate(ventry.get("plugins", [])):
                where = f"models.{model}.versions.{version}.plugins[{i}]"
                if not isinstance(raw, dict):
                    raise PluginError("a plugin entry from an older tritonpkg (a bare wheel name); package again",
                                      file=source, field=where, expected="an object with name, version, wheel, sha256")
                rec = PluginRecord.model_validate(raw)
                key = rec.wheel or rec.name
                if key in found and found[key].sha256 != rec.sha256:
                    raise PluginError(f"{key} is recorded twice with different sha256", file=source, field=where,
                                      expected="one wheel per file name")
                found[key] = rec
    return [found[k] for k in sorted(found)]
