"""Imported by vLLM in each of its worker processes, where lora_index_fix.engine_args named NoLoraIndexFix as the
engine argument worker_extension_cls: the import applies the correction there, before the model runs."""

from __future__ import annotations

import lora_index_fix
from vllm.logger import init_logger

WRAPPED = lora_index_fix.apply()
if WRAPPED:
    init_logger(__name__).info("tritonpkg: %s wrapped in this worker: rows of LoRA index -1 get no adapter (%s)",
                               ", ".join(WRAPPED), lora_index_fix.UPSTREAM)


class NoLoraIndexFix:
    """Adds nothing to vLLM's worker: naming it is how this module gets imported in the worker process."""
