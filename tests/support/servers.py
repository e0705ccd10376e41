"""Settings of the tritonservers that test fixtures start and no test stops on purpose."""

FIXTURE_EXIT_TIMEOUT_S = 10
"""Triton's exit timeout for a fixture's server, whose stop no test is about. After a client has cancelled streams,
Triton 2.51 sometimes never asks a model to finalize, and its stop waits the whole exit timeout (30 s by default) for
it (docs/concepts/engine-death.md); measured in most runs of the shared vLLM server, the OpenAI API module's and the
embedding module's servers. An engine's own shutdown takes 2-4 s here. What is left when the timeout runs out is
killed with the server's process group. The stop tests (test_vllm_backend_lifecycle, test_engine_death,
test_serve_stack) keep the product's exit timeout."""
