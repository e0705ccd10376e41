"""One public /metrics for a serving stack: Triton's own metrics (fetched over HTTP from its internal,
loopback-only metrics port) merged with every vLLM metric that the engines write into the Prometheus
multiprocess directory, with each metric family exactly once."""

from __future__ import annotations

from tritonpkg.metrics.exposition import MergedExposition, family_blocks, merge_expositions
from tritonpkg.metrics.multiproc import (
    MultiprocDirClaim,
    claim_multiproc_dir,
    multiproc_exposition,
    prepare_multiproc_dir,
)
from tritonpkg.metrics.server import MergedMetricsServer

__all__ = [
    "MergedExposition",
    "MergedMetricsServer",
    "MultiprocDirClaim",
    "claim_multiproc_dir",
    "family_blocks",
    "merge_expositions",
    "multiproc_exposition",
    "prepare_multiproc_dir",
]
