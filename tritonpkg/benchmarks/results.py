"""A bench's results as JSON (`--json OUT`): the figures its tables print, with the command line and the host
they came from. bench/results/ holds the committed runs that bench/README.md and the docs quote; the docs'
plots are drawn from those files and tests/unit/test_bench_results.py checks every quoted figure against them."""

from __future__ import annotations

import datetime
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

SCHEMA = 1


def record(bench: str, options: dict[str, Any], results: dict[str, Any]) -> dict[str, Any]:
    """The file's content: which bench, how it was called, on what, when, and its results."""
    return {"schema": SCHEMA, "bench": bench, "argv": sys.argv[1:], "options": options,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "host": {"cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)},
            "results": results}


def write(path: str | os.PathLike[str] | None, bench: str, options: dict[str, Any],
          results: dict[str, Any]) -> Path | None:
    """Write the record to `path` whole or not at all (a temporary file beside it, then renamed); None: no file
    asked for. Values must be JSON's own (numbers, strings, lists, dicts)."""
    if path is None:
        return None
    target = Path(path)
    text = json.dumps(record(bench, options, results), indent=1, allow_nan=False) + "\n"
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
