"""The README is a landing page: at most 170 lines, no table row over 25 words, the two commands as they
are, and every relative link pointing at a file that exists (the docs pages it sends readers to)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_is_short() -> None:
    lines = README.splitlines()
    assert len(lines) <= 170, f"README.md has {len(lines)} lines; move the detail into docs/"
    rows = [ln for ln in lines if ln.startswith("|") and not re.match(r"^\|[-| :]+\|$", ln)]
    long_rows = [(len(ln.replace("|", " ").split()), ln[:60]) for ln in rows if len(ln.replace("|", " ").split()) > 25]
    assert not long_rows, long_rows


def test_readme_keeps_the_two_commands() -> None:
    assert "\nbash scripts/demo.sh     # set up, then package examples/tiny-llm" in README
    assert "\nbash scripts/test.sh     # set up, then run the whole test suite" in README


def test_readme_links_resolve() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if "://" not in link]
    assert local, "the README links to the docs"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, missing
