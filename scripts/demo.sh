#!/usr/bin/env bash
# Set up, then the main job on the embedded default: make the tiny offline LLM, package
# examples/tiny-llm, validate the repository, serve it in the real Triton (+ vLLM), send one request,
# print the answer. Pass another example folder to try it instead, e.g. examples/sentiment-custom.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
EXAMPLE=${1:-examples/tiny-llm}
if [ -f "$EXAMPLE/make_tiny_llm.py" ]; then
  .venv/bin/python "$EXAMPLE/make_tiny_llm.py"
fi
# vLLM on the CPU: a small KV cache is plenty for the tiny model (GiB).
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
exec .venv/bin/tritonpkg demo "$EXAMPLE" -o model_repository
