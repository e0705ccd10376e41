"""What an environment already has where a wheel would write: every top-level name of its import path
(packages, modules, `*.libs` folders, from each distribution's top_level.txt and RECORD) and every
script of its bin folder, each with the distributions that own it.

Standard library only, no tritonpkg import: tritonpkg.plugins.target runs this file's source in the
runtime interpreter (which need not have tritonpkg), and `package` calls it in-process."""

from __future__ import annotations

import inspect
import json
import os
import sys
import sysconfig
from importlib import metadata


def top_name(first: str, is_dir: bool) -> str:
    """The name a site-packages entry is imported (or found) as: a folder as is, a module without its
    suffix (`six.py`, `_x.cpython-311-x86_64-linux-gnu.so` -> `six`, `_x`), any other file as is."""
    if is_dir:
        return first
    return inspect.getmodulename(first) or first


def _recorded(dist) -> list[str]:
    """The paths a distribution installed, as its RECORD names them (read as text: parsing every line of
    torch's RECORD into PackagePath objects costs a second); legacy metadata through `files`."""
    text = dist.read_text("RECORD")
    if text is None:
        return [str(f).replace(os.sep, "/") for f in dist.files or ()]
    if '"' in text:
        import csv

        return [row[0] for row in csv.reader(text.splitlines()) if row]
    return [line.rsplit(",", 2)[0] for line in text.splitlines() if line]


def footprint() -> dict:
    paths = sysconfig.get_paths()
    scripts_dirs = {os.path.normpath(paths["scripts"]), os.path.realpath(paths["scripts"])}
    tops: dict[str, set[str]] = {}
    scripts: dict[str, set[str]] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        owned: set[str] = set()
        for line in (dist.read_text("top_level.txt") or "").splitlines():
            if line.strip():
                owned.add(line.strip().replace("\\", "/").split("/", 1)[0])
        base = str(dist.locate_file(""))
        for rel in _recorded(dist):
            first, sep, _ = rel.partition("/")
            if first == "..":  # scripts, headers, data: recorded relative to site-packages
                full = os.path.normpath(os.path.join(base, rel))
                if os.path.dirname(full) in scripts_dirs:
                    scripts.setdefault(os.path.basename(full), set()).add(name)
            elif first and first != "__pycache__":
                owned.add(top_name(first, bool(sep)))
        for top in owned:
            tops.setdefault(top, set()).add(name)
    return {"purelib": paths["purelib"], "platlib": paths["platlib"], "scripts_dir": paths["scripts"],
            "tops": {k: sorted(v) for k, v in tops.items()}, "scripts": {k: sorted(v) for k, v in scripts.items()},
            "sys_path": [p for p in sys.path if p]}


if __name__ == "__main__":
    print(json.dumps(footprint()))
