"""vLLM's Prometheus metrics, readable by dashboards written for NVIDIA's vLLM backend.

vLLM labels its series `model_name` (the served model name, by default the weights path) and `engine`;
NVIDIA's backend labels its own `model` and `version` (the Triton model). Every vLLM series here keeps
vLLM's labels and also carries `model` and `version`, and the one family NVIDIA's backend exposes under
a name vLLM has since renamed comes back as an alias: `vllm:time_per_output_token_seconds` (vLLM 0.32:
`vllm:inter_token_latency_seconds`), observed from the same inter-token latencies.

Imports vLLM and prometheus_client only when called: it runs inside the Triton stub, after the locale fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from prometheus_client import Histogram

M = TypeVar("M")
H = TypeVar("H")

# NVIDIA's name -> the vLLM 0.32 family observed from the same values.
ALIASES = {"vllm:time_per_output_token_seconds": "vllm:inter_token_latency_seconds"}
GROUP_CLASSES = ("_spec_decoding_cls", "_kv_connector_cls", "_ec_connector_cls", "_perf_metrics_cls")
"""PrometheusStatLogger's per-feature metric groups; each vLLM has some of them (0.27.1 has no EC connector)."""


def inter_token_buckets(logger: Any, vllm_config: Any) -> list[float]:
    """The buckets vLLM gives vllm:inter_token_latency_seconds, so the alias family matches it bucket for bucket:
    vllm.v1.metrics.buckets (vLLM 0.30+, with the config's overrides), else the bounds of the histogram vLLM
    made (earlier releases write the list inline)."""
    try:
        from vllm.v1.metrics.buckets import histogram_buckets
    except ImportError:
        made = next(iter(logger.histogram_inter_token_latency.values()))
        return [b for b in made._upper_bounds if b != float("inf")]
    return histogram_buckets("inter_token_latency", overrides=vllm_config.observability_config.custom_histogram_buckets)


def with_labels(metric_cls: type[M], extra: dict[str, str]) -> type[M]:
    """`metric_cls` (a prometheus_client metric) whose every series also carries the `extra` labels."""

    class Labelled(metric_cls):  # type: ignore[misc, valid-type]  # subclasses the class passed in
        def __init__(self, *args: Any, labelnames: Any = (), **kwargs: Any) -> None:
            labelnames = list(labelnames)
            # A child made by labels() already has the full names; a label vLLM sets itself stays vLLM's.
            self._extra = {} if "_labelvalues" in kwargs else {k: v for k, v in extra.items() if k not in labelnames}
            super().__init__(*args, labelnames=[*labelnames, *self._extra], **kwargs)

        def labels(self, *values: Any, **kw: Any):
            if values:
                return super().labels(*values, *self._extra.values())
            return super().labels(**kw, **self._extra)

    Labelled.__name__ = metric_cls.__name__
    return Labelled


def stat_logger(model: str, version: str):
    """A vLLM PrometheusStatLogger class (a stat-logger factory for AsyncLLM) labelling every series with
    the Triton model and version, and adding NVIDIA's alias families."""
    from prometheus_client import Counter, Gauge, Histogram
    from vllm.v1.metrics.loggers import PrometheusStatLogger
    from vllm.v1.metrics.utils import create_metric_per_engine

    extra = {"model": model, "version": version}
    gauge, counter, histogram = with_labels(Gauge, extra), with_labels(Counter, extra), with_labels(Histogram, extra)
    classes: dict[str, type] = {"_gauge_cls": gauge, "_counter_cls": counter, "_histogram_cls": histogram}

    def relabel(helper: type[H]) -> type[H]:
        """vLLM's per-feature metric groups (spec decoding, KV/EC connectors, perf) make their own series."""
        attrs = {name: cls for name, cls in classes.items() if hasattr(helper, name)}
        # type() with `helper` as the only base makes a subclass of it
        return cast("type[H]", type(helper.__name__, (helper,), attrs)) if attrs else helper

    class TritonLabelledStatLogger(PrometheusStatLogger):
        _gauge_cls = gauge
        _counter_cls = counter
        _histogram_cls = histogram

        def __init__(self, vllm_config, engine_indexes=None):
            super().__init__(vllm_config, engine_indexes)
            alias = self._histogram_cls(
                name="vllm:time_per_output_token_seconds",
                documentation="Histogram of inter-token latency in seconds (NVIDIA's backend's name for "
                              "vllm:inter_token_latency_seconds, which has the same values).",
                buckets=inter_token_buckets(self, vllm_config), labelnames=["model_name", "engine"])
            # the children of a Histogram are Histograms
            self._time_per_output_token = cast(
                "dict[int, Histogram]", create_metric_per_engine(alias, self.per_engine_labelvalues))

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0):
            super().record(scheduler_stats, iteration_stats, mm_cache_stats, engine_idx)
            if iteration_stats is not None and engine_idx in self._time_per_output_token:
                for itl in iteration_stats.inter_token_latencies_iter:
                    self._time_per_output_token[engine_idx].observe(itl)

    for name in GROUP_CLASSES:
        if hasattr(PrometheusStatLogger, name):
            setattr(TritonLabelledStatLogger, name, relabel(getattr(PrometheusStatLogger, name)))
    return TritonLabelledStatLogger
