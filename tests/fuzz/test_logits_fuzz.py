"""logits_ext's C++ engine: a few seconds of its libFuzzer target (ASan + UBSan, logits_ext/fuzz/run.sh) with the
saved corpus replayed, and the bugs it found kept as regression cases through the Python binding (guard cells
around the buffers show a write outside them, which ASan would catch in the fuzz build)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tritonpkg_logits import _core

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "logits_ext" / "fuzz" / "run.sh"
SMOKE_SECONDS = os.environ.get("TRITONPKG_FUZZ_LOGITS_SECONDS", "5")
GUARD = 4


def _clang() -> str:
    """clang++ with libFuzzer's runtime; without it the smoke is skipped, except under CI (scripts/setup.sh
    installs clang where it can, so CI never passes by skipping it)."""
    cxx = shutil.which("clang++") or shutil.which("clang++-14")
    if cxx is not None:
        runtime = subprocess.run([cxx, "-print-runtime-dir"], capture_output=True, text=True, check=False).stdout
        if (Path(runtime.strip()) / "libclang_rt.fuzzer-x86_64.a").is_file():
            return cxx
    (pytest.fail if os.environ.get("CI") else pytest.skip)("clang++ with libFuzzer's runtime is not installed")
    raise AssertionError("unreachable")


def test_libfuzzer_smoke():
    """Builds the ASan/UBSan target (cached by its sources' hash: logits_ext/fuzz/run.sh) and runs it a few seconds."""
    env = {**os.environ, "CXX": _clang()}
    out = subprocess.run(["bash", str(RUN), "--seconds", SMOKE_SECONDS], capture_output=True, text=True, env=env,
                         timeout=900, check=False)
    tail = (out.stdout + out.stderr)[-4000:]
    assert out.returncode == 0, tail
    assert "Done " in tail and "stat::number_of_executed_units" in tail, tail


def _guarded(n: int, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """A zeroed buffer of n cells with GUARD cells on each side, and the view the engine is given."""
    whole = np.zeros(n + 2 * GUARD, dtype=dtype)
    return whole, whole[GUARD:GUARD + n]


def _untouched(whole: np.ndarray, fill: int | float) -> bool:
    return bool((whole[:GUARD] == fill).all() and (whole[-GUARD:] == fill).all())


@pytest.mark.parametrize("token", [-1, -3, 4, 6])
def test_a_repeat_cap_never_bans_an_id_outside_the_row(token):
    """An id outside [0, vocab) fed `max_repeat` times was banned as the repeated token: -inf written before the
    logits row (id -1 is the state's initial `last`, so one -1 was enough) or past it, and a bit set past the
    bitmask (found by logits_ext/fuzz: heap-buffer-overflow in Engine::apply)."""
    engine = _core.Engine(4, [0], [])
    engine.set_row(0, engine.add_ngram("cap", [], 1))
    engine.feed(0, [token])
    whole, row = _guarded(4, np.float32)
    engine.apply(row.ctypes.data, 1, 4, 4, [], 1)
    assert _untouched(whole, 0.0), whole
    assert not np.isinf(row).any()  # nothing in range was repeated
    whole_mask, mask = _guarded(1, np.uint32)
    engine.fill_bitmask(mask.ctypes.data, 1, 1, [], 1)
    assert _untouched(whole_mask, 0), whole_mask
    assert engine.allowed(0) == [0, 1, 2, 3]


@pytest.mark.parametrize("value", [2**32, 2**32 + 1, 2**40])
def test_an_id_past_int32_in_the_output_list_is_not_a_real_id(value):
    """A list value past int32 was cut to its low 32 bits (2**32 became token 0) and walked the DFA as a real id;
    an id outside the vocabulary leaves the constraint, as any token it does not allow: only EOS remains."""
    engine = _core.Engine(4, [3], [])
    dfa = engine.add_dfa("walk", 0, 3, [[0, 0, 1], [0, 1, 1], [1, 1, 2]], [2])
    engine.set_row(0, dfa, [value])
    assert engine.allowed(0) == [3]
