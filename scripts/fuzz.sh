#!/usr/bin/env bash
# A fuzz campaign over the toolkit's parsers of outside input (tests/fuzz): bash scripts/fuzz.sh [TARGET ...]
# [--minutes N] (default: every target, 1 minute each). New crashing inputs go to tests/fuzz/corpus/<target>/,
# which the default test run replays. Memory is bounded (4 GiB of address space per campaign, TRITONPKG_FUZZ_MEMORY_KB).
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -v "${TRITONPKG_FUZZ_MEMORY_KB:-4194304}"
exec .venv/bin/python -m tests.fuzz.campaign "$@"
