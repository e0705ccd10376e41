"""The docs' shell examples run and exit as shown. A fenced ```bash block right after an HTML comment
`<!-- run: exit N -->` is executed, one command line at a time, in a scratch folder shared by the page's
blocks (in page order; `examples/` linked in): every line but the block's last must exit 0, the last N.
`tritonpkg` is the one in this interpreter's virtualenv. Blocks marked `<!-- run: served, ... -->` start
servers: tests/integration/test_docs_served.py runs those."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MARKED = re.compile(r"^<!-- run: exit (\d+) -->\n```bash\n(.*?)\n```", re.DOTALL | re.MULTILINE)
MARKER = re.compile(r"^<!-- run: (?!served)", re.MULTILINE)


def _blocks(page: Path) -> list[tuple[int, list[str]]]:
    text = page.read_text(encoding="utf-8")
    found = [(int(m.group(1)), [ln for ln in m.group(2).splitlines() if ln.strip() and not ln.startswith("#")])
             for m in MARKED.finditer(text)]
    assert len(found) == len(MARKER.findall(text)), f"{page}: a `<!-- run: exit N -->` not followed by ```bash"
    return found


PAGES = sorted(p for p in DOCS.rglob("*.md") if MARKER.search(p.read_text(encoding="utf-8")))


def test_the_docs_have_runnable_examples() -> None:
    assert sum(len(_blocks(p)) for p in PAGES) >= 3


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_shell_examples_exit_as_shown(page: Path, tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "120"
    for expected, lines in _blocks(page):
        for i, line in enumerate(lines):
            want = expected if i == len(lines) - 1 else 0
            proc = subprocess.run(["bash", "-c", line], check=False, cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=120)
            assert proc.returncode == want, (f"{page.name}: `{line}` exited {proc.returncode}, the docs show "
                                             f"{want}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
