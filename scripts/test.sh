#!/usr/bin/env bash
# Set up, then run the whole test suite: unit tests, and the integration tests that start one real
# tritonserver (and one vLLM engine) per test session. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
