"""The automatic gate between traffic steps, from Triton's own /metrics (pure: text in, verdict out).

Error rate = new failures / new requests since the previous sample
(nv_inference_request_failure and nv_inference_request_success, summed over versions).
p99 = Triton's latency summary (nv_inference_request_summary_us{quantile="0.99"}, served when the
server runs with --metrics-config summary_latencies=true); without it, the mean of the step
(nv_inference_request_duration_us / count) stands in, and the verdict says so."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

LINE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class Sample(BaseModel):
    success: float = 0.0
    failure: float = 0.0
    duration_us: float = 0.0
    p99_us: float | None = None


DEFAULT_MIN_REQUESTS = 1
"""A step whose gate saw no request of the new version has no verdict to give: passing it would move
traffic on to a version nothing has tested. One is the least that makes the gate judge something;
deployment.min_requests or --min-requests raises it (an error rate of 1% shows only over ~100 requests),
0 accepts a gate on liveness alone (a deployment with no traffic during the rollout)."""


class Limits(BaseModel):
    max_error_rate: float = 0.01
    max_p99_ms: float = 1000.0
    min_requests: int = Field(default=DEFAULT_MIN_REQUESTS, ge=0, description="new requests seen per step")


class Verdict(BaseModel):
    ok: bool
    requests: int
    error_rate: float
    p99_ms: float | None
    reason: str


def parse(text: str, model: str) -> Sample:
    """Sum Triton's per-version counters of `model` from a Prometheus text exposition."""
    sample = Sample()
    p99s: list[float] = []
    for line in text.splitlines():
        m = LINE.match(line)
        if not m or line.startswith("#"):
            continue
        labels = dict(LABEL.findall(m["labels"] or ""))
        if labels.get("model") != model:
            continue
        value = float(m["value"])
        name = m["name"]
        if name == "nv_inference_request_success":
            sample.success += value
        elif name == "nv_inference_request_failure":
            sample.failure += value
        elif name == "nv_inference_request_duration_us":
            sample.duration_us += value
        elif name == "nv_inference_request_summary_us" and labels.get("quantile") == "0.99" and value == value:
            p99s.append(value)  # NaN (no observation yet) is skipped by the value == value test
    sample.p99_us = max(p99s) if p99s else None
    return sample


def judge(before: Sample, after: Sample, limits: Limits) -> Verdict:
    ok_n = after.success - before.success
    bad_n = after.failure - before.failure
    total = int(ok_n + bad_n)
    rate = bad_n / total if total else 0.0
    if after.p99_us is not None:
        p99_ms: float | None = after.p99_us / 1000
        what = "p99"
    else:
        p99_ms = (after.duration_us - before.duration_us) / total / 1000 if total else None
        what = "mean (no latency summary)"
    problems = []
    if total < limits.min_requests:
        problems.append(f"only {total} requests reached the new version (< {limits.min_requests})")
    if rate > limits.max_error_rate:
        problems.append(f"error rate {rate:.2%} > {limits.max_error_rate:.2%}")
    if p99_ms is not None and p99_ms > limits.max_p99_ms:
        problems.append(f"{what} {p99_ms:.1f} ms > {limits.max_p99_ms:g} ms")
    latency = f"{what} {p99_ms:.1f} ms" if p99_ms is not None else "no latency yet"
    reason = "; ".join(problems) or f"{total} requests, error rate {rate:.2%}, {latency}"
    return Verdict(ok=not problems, requests=total, error_rate=rate, p99_ms=p99_ms, reason=reason)
