#!/usr/bin/env bash
# Set up, lint and type-check, then run the whole test suite: unit tests, and the integration tests that start
# one real tritonserver (and one vLLM engine) per test session. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Fail fast, before minutes of tests: ruff and mypy read their settings from pyproject.toml.
.venv/bin/ruff check .
.venv/bin/mypy
docs=$(NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -d "$(mktemp -d)" 2>&1) || { echo "$docs"; exit 1; }  # the docs site (-q would hide the warnings --strict counts)
# A whole-suite run fails when a test that must run on these machines was skipped (tests/allowed_skips.txt).
[ "$#" -eq 0 ] && export TRITONPKG_SKIP_GUARD=1
# The slowest tests are listed at the end, so a run shows where the suite's minutes go.
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "$@"
