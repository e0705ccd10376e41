"""Regenerate the docs' command pages (docs/commands/*.md) from the Typer app.

    .venv/bin/python scripts/gen_docs.py            # command pages
    .venv/bin/python scripts/gen_docs.py --pictures # also the SVG captures and benchmark plots in docs/img/
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tritonpkg.devtools.cli_docs import write_pages  # noqa: E402


def main(argv: list[str]) -> int:
    for path in write_pages(ROOT / "docs"):
        print(path.relative_to(ROOT))
    if "--pictures" in argv:
        from tritonpkg.devtools import doc_pictures

        for path in doc_pictures.generate(ROOT):
            print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
