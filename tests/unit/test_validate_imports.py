"""validate/imports.py: which vLLM symbols a backend's code demands of the target's vLLM."""

from __future__ import annotations

from tritonpkg.validate.imports import vllm_imports

SOURCE = '''\
import os
import vllm.envs
from vllm import SamplingParams

try:
    from vllm.v1.metrics.buckets import histogram_buckets
except ImportError:
    histogram_buckets = None

try:
    from vllm.new_thing import thing
except (ModuleNotFoundError, AttributeError):
    thing = None


def f():
    try:
        from vllm.inside import a
    except ValueError:
        pass
    from vllm.later import b
'''


def test_imports_guarded_by_an_import_error_handler_are_optional(tmp_path):
    src = tmp_path / "model.py"
    src.write_text(SOURCE)
    found = {s for s, _ in vllm_imports(src)}
    assert found == {"vllm.envs", "vllm:SamplingParams", "vllm.inside:a", "vllm.later:b"}


def test_the_toolkit_backends_metrics_buckets_are_optional():
    """backends/vllm falls back to the histogram vLLM made where vllm.v1.metrics.buckets (0.30+) is missing."""
    from pathlib import Path

    backend = Path(__file__).resolve().parents[2] / "backends" / "vllm"
    symbols = {s for f in backend.rglob("*.py") for s, _ in vllm_imports(f)}
    assert "vllm.v1.metrics.loggers:PrometheusStatLogger" in symbols
    assert not any(s.startswith("vllm.v1.metrics.buckets") for s in symbols)
