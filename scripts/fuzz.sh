#!/usr/bin/env bash
# A fuzz campaign over the toolkit's parsers of outside input (tests/fuzz): bash scripts/fuzz.sh [TARGET ...]
# [--minutes N] (default: every target, 1 minute each). New crashing inputs go to tests/fuzz/corpus/<target>/,
# which the default test run replays. Memory is bounded (4 GiB of address space per campaign, TRITONPKG_FUZZ_MEMORY_KB).
#
#   bash scripts/fuzz.sh --atheris [--minutes N] [-- LIBFUZZER FLAGS]   # coverage-guided: the spec loader under atheris
#
# --atheris installs the `fuzz` extra (atheris) into .venv when it is missing and runs tests/fuzz/atheris_spec.py:
# new coverage is kept in tests/fuzz/atheris-corpus/spec/ (not in git), a crash is saved into the replayed corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -v "${TRITONPKG_FUZZ_MEMORY_KB:-4194304}"
if [ "${1:-}" = "--atheris" ]; then
  shift
  minutes=1
  if [ "${1:-}" = "--minutes" ]; then minutes=$2; shift 2; fi
  [ "${1:-}" = "--" ] && shift
  .venv/bin/python -c "import atheris" 2>/dev/null || .venv/bin/python -m pip install -q -e ".[fuzz]"
  seconds=$(python3 -c "print(max(1, int(float('$minutes') * 60)))")
  exec .venv/bin/python -m tests.fuzz.atheris_spec -max_total_time="$seconds" -rss_limit_mb=2048 "$@"
fi
case " $* " in
  *" --coverage "*) .venv/bin/python -c "import coverage" 2>/dev/null || .venv/bin/python -m pip install -q -e ".[fuzz]" ;;
esac
exec .venv/bin/python -m tests.fuzz.campaign "$@"
