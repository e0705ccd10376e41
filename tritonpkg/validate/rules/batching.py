"""max_batch_size and the schedulers (2.51 poll errors: "'max_batch_size' must be non-negative",
"dynamic batching preferred size must be positive", "... must be <= max batch size").
dynamic_batching with max_batch_size 0 loads (the batcher has nothing to batch): a warning."""

from __future__ import annotations

from collections.abc import Iterator

from tritonpkg.validate.context import Context
from tritonpkg.validate.loaded import LoadedModel
from tritonpkg.validate.report import Problem


def batching(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    cfg = m.config
    if cfg is None:
        return
    mbs = cfg.max_batch_size
    if mbs < 0:
        yield m.problem("batching.max-batch-size", "error", f"max_batch_size is {mbs}",
                        field="max_batch_size", expected=">= 0 (0 = the model does not batch)")
    if cfg.HasField("dynamic_batching"):
        if mbs == 0:
            yield m.problem("batching.dynamic-without-batch", "warning",
                            "dynamic_batching with max_batch_size 0: Triton loads it but never batches",
                            field="dynamic_batching", expected="max_batch_size > 0")
        for i, p in enumerate(cfg.dynamic_batching.preferred_batch_size):
            if p <= 0:
                yield m.problem("batching.preferred", "error", f"preferred_batch_size {p} is not positive",
                                field=f"dynamic_batching.preferred_batch_size[{i}]", expected=">= 1")
            elif p > max(mbs, 0):  # with max_batch_size 0 any preferred size fails (seen on 2.51)
                yield m.problem("batching.preferred", "error",
                                f"preferred_batch_size {p} exceeds max_batch_size {mbs}",
                                field=f"dynamic_batching.preferred_batch_size[{i}]", expected=f"<= {mbs}")


RULES = [batching]
