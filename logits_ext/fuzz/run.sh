#!/usr/bin/env bash
# Build logits_ext's libFuzzer target (fuzz_engine.cpp: the engine with ASan + UBSan, clang's libFuzzer) and run
# it: bash logits_ext/fuzz/run.sh [--seconds N] [--build-only]  (default 60 s). The saved corpus
# (logits_ext/fuzz/corpus/: each input a campaign found, kept as a regression case) is replayed first; new
# coverage goes to the build folder's corpus/ (not in git); a crashing input is written to crashes/ and the script
# exits non-zero. CI runs a few seconds of it (tests/fuzz/test_logits_fuzz.py).
# The build lives outside the checkout, named by a hash of its sources, compiler and Python
# ($TRITONPKG_FUZZ_BUILD, default ~/.cache/tritonpkg/fuzz/<hash>): a fresh clone (CI's) reuses it instead of
# spending half a minute compiling with ASan, and a changed source or compiler gets a build of its own.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
seconds=60
build_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --build-only) build_only=1; shift ;;
    *) echo "usage: $0 [--seconds N] [--build-only]" >&2; exit 2 ;;
  esac
done
CXX=${CXX:-$(command -v clang++ || command -v clang++-14 || true)}
[ -n "$CXX" ] || { echo "fuzz: clang++ not found (scripts/setup.sh installs clang as root on Debian)" >&2; exit 3; }
PY=${PYTHON:-"$root/.venv/bin/python"}
read -r pyinc pylibdir pyver pybind <<<"$("$PY" -c 'import sysconfig, pybind11
print(sysconfig.get_paths()["include"], sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDVERSION"),
      pybind11.get_include())')"
key="$(cat "$here/fuzz_engine.cpp" "$root"/logits_ext/src/* "$0" | sha256sum | cut -c1-16)"
key="$key-$("$CXX" --version | head -1 | sha256sum | cut -c1-8)-py$pyver"
build="${TRITONPKG_FUZZ_BUILD:-${XDG_CACHE_HOME:-$HOME/.cache}/tritonpkg/fuzz/$key}"
mkdir -p "$build/corpus" "$here/corpus" "$here/crashes"
bin="$build/fuzz_engine"
if [ ! -x "$bin" ]; then
  "$CXX" -std=c++17 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -I"$pybind" -I"$pyinc" "$here/fuzz_engine.cpp" \
    -L"$pylibdir" -lpython"$pyver" -Wl,-rpath,"$pylibdir" -o "$bin.tmp"
  mv "$bin.tmp" "$bin"
fi
[ "$build_only" = 1 ] && exit 0
# Python's own allocations live until exit: leak reports would be the interpreter's, not the engine's.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export PYTHONHOME="$("$PY" -c 'import sys; print(sys.base_prefix)')"
exec "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 \
  -artifact_prefix="$here/crashes/" "$build/corpus" "$here/corpus"
