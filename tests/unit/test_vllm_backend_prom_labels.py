"""backends/vllm/prom_labels.py: every vLLM series also carries NVIDIA's `model` and `version` labels."""

from __future__ import annotations

import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "backends" / "vllm"))
from prom_labels import with_labels

EXTRA = {"model": "tiny_llm", "version": "1"}


def samples(registry: CollectorRegistry) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for m in registry.collect() for s in m.samples}


def test_positional_and_keyword_children_carry_the_model_and_version():
    registry = CollectorRegistry()
    counter = with_labels(Counter, EXTRA)("vllm:x", "doc", labelnames=["model_name", "engine"], registry=registry)
    counter.labels("/weights", "0").inc(2)
    counter.labels(model_name="/weights", engine="0").inc()  # the same series
    gauge = with_labels(Gauge, EXTRA)("vllm:g", "doc", labelnames=["model_name"], registry=registry)
    gauge.labels(model_name="/weights").set(5)
    got = samples(registry)
    labels = (("engine", "0"), ("model", "tiny_llm"), ("model_name", "/weights"), ("version", "1"))
    assert got[("vllm:x_total", labels)] == 3.0
    assert got[("vllm:g", (("model", "tiny_llm"), ("model_name", "/weights"), ("version", "1")))] == 5.0


def test_histogram_buckets_keep_their_le_label_beside_the_extra_ones():
    registry = CollectorRegistry()
    hist = with_labels(Histogram, EXTRA)("vllm:h", "doc", labelnames=["model_name"], buckets=[0.1, 1.0],
                                         registry=registry)
    hist.labels("/w").observe(0.5)
    got = samples(registry)
    assert got[("vllm:h_bucket", (("le", "1.0"), ("model", "tiny_llm"), ("model_name", "/w"), ("version", "1")))] == 1
    assert got[("vllm:h_count", (("model", "tiny_llm"), ("model_name", "/w"), ("version", "1")))] == 1


def test_a_label_vllm_sets_itself_is_left_to_vllm():
    registry = CollectorRegistry()
    info = with_labels(Gauge, EXTRA)("vllm:info", "doc", labelnames=["version", "block_size"], registry=registry)
    info.labels(version="0.32", block_size="16").set(1)
    assert samples(registry) == {("vllm:info", (("block_size", "16"), ("model", "tiny_llm"), ("version", "0.32"))): 1.0}
