#!/usr/bin/env bash
# Serve the docs site locally (http://127.0.0.1:8000, rebuilt on every change). Regenerate the command
# pages first, from the CLI itself; `--pictures` also re-captures the SVGs and re-draws the benchmark plots
# (real runs of the commands on examples/sentiment-custom: about a minute).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/mkdocs ] || .venv/bin/python -m pip install -q mkdocs mkdocs-material matplotlib
.venv/bin/python scripts/gen_docs.py "$@" >/dev/null
export NO_MKDOCS_2_WARNING=1
exec .venv/bin/mkdocs serve --strict -a "${DOCS_ADDR:-127.0.0.1:8000}"
