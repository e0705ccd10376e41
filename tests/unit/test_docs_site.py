"""The docs site builds with `mkdocs build --strict` (a broken link, a missing page or anchor fails it), its
pictures are there, and the benchmark plots are what the benches' results files (bench/results/*.json) draw:
regenerated they equal the files on disk (fix: `.venv/bin/python scripts/gen_docs.py --pictures`)."""

from __future__ import annotations

import filecmp
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMG = ROOT / "docs" / "img"
MKDOCS = Path(sys.executable).parent / "mkdocs"

pytestmark = pytest.mark.skipif(not MKDOCS.exists() and shutil.which("mkdocs") is None,
                                reason="mkdocs is not installed (the dev extra)")


def test_the_site_builds_strict(tmp_path: Path) -> None:
    # not -q: mkdocs counts the warnings --strict fails on only when they are logged
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    exe = str(MKDOCS) if MKDOCS.exists() else "mkdocs"
    proc = subprocess.run([exe, "build", "--strict", "-d", str(tmp_path / "site")], check=False, cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    assert (tmp_path / "site" / "commands" / "serve" / "index.html").exists()


def test_pictures_are_there() -> None:
    captures = [p for p in IMG.glob("*.svg") if not p.name.startswith("bench-")]
    plots = list(IMG.glob("bench-*.svg"))
    assert len(captures) >= 4 and len(plots) >= 2, (captures, plots)
    for p in captures:
        assert "Generated with Rich" in p.read_text(encoding="utf-8"), f"{p.name} is not rich's own SVG export"


def test_benchmark_plots_match_their_results(tmp_path: Path) -> None:
    matplotlib = pytest.importorskip("matplotlib")
    from tritonpkg.devtools.bench_plots import plots

    on_disk = sorted(IMG.glob("bench-*.svg"))
    drawn_with = {m.group(1) for p in on_disk
                  if (m := re.search(r"matplotlib ([^<\s]+)", p.read_text(encoding="utf-8")))}
    if drawn_with != {matplotlib.__version__}:
        pytest.skip(f"the plots were drawn with matplotlib {drawn_with}, this is {matplotlib.__version__}: "
                    "SVG bytes differ between versions")
    drawn = plots(ROOT, tmp_path)
    assert sorted(p.name for p in drawn) == [p.name for p in on_disk], \
        "docs/img/bench-*.svg are not the plots of bench/results/: run scripts/gen_docs.py --pictures"
    for path in drawn:
        assert filecmp.cmp(path, IMG / path.name, shallow=False), \
            f"{path.name} differs from its results file's plot: run scripts/gen_docs.py --pictures"
