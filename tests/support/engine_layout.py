"""vLLM's engine layout in the tests. Every engine a test starts inherits the session's environment, where
VLLM_ENABLE_V1_MULTIPROCESSING=0 runs the model worker inside the EngineCore process: the layout vLLM gives a
GPU at tensor-parallel 1, where production runs. vLLM's CPU platform otherwise runs the worker in a process of its
own, one more interpreter importing torch and vLLM: about 15 s and 20 CPU-s of every engine start on a 2-core
machine. The modules about the engine's processes, and the shared vLLM server, run the CPU layout."""

VLLM_MP = "VLLM_ENABLE_V1_MULTIPROCESSING"
GPU_LAYOUT = "0"
"""The worker inside EngineCore (vLLM's CPU platform keeps its `uni` executor)."""
CPU_LAYOUT = "1"
"""vLLM's CPU default: the `mp` executor, the worker a process of its own."""
