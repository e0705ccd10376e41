"""tritonpkg_logits: C++ batched constraint logits processors for vLLM.

``Engine`` (tritonpkg_logits.engine) is the batched state-machine engine; ``vllm_adapter`` holds the
processor vLLM loads from the ``vllm.logits_processors`` entry point; ``reference`` is the plain-Python
model the tests compare the engine against.
"""

from tritonpkg_logits.engine import Engine
from tritonpkg_logits.spec import EXTRA_ARGS_KEY, SpecError, normalize

__all__ = ["EXTRA_ARGS_KEY", "Engine", "SpecError", "normalize"]
