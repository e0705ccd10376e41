"""Generation: `text_input` + sampling parameters -> `text_output` and the additional outputs asked for,
one response with the whole text or one per streamed delta."""

from __future__ import annotations

from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from contract import RETURN_FLAGS
from request_base import BaseRequest, Context, RequestError, RequestInputs
from request_params import logprobs_json, prompt_logprobs_json
from stream_merge import Step


class GenerateRequest(BaseRequest):
    def __init__(self, inputs: RequestInputs, ctx: Context) -> None:
        super().__init__()
        self.prompt: str | list[int] = inputs.prompt
        token_ids = input_token_ids(inputs.request, "prompt_token_ids")
        if token_ids is not None:
            if self.prompt:
                raise RequestError("send the prompt as 'text_input' or as 'prompt_token_ids', not both "
                                   "(text_input must be \"\" with prompt_token_ids)")
            self.prompt = token_ids
        self.returns = {name: inputs.flag(name) for name in RETURN_FLAGS}
        self.stream = inputs.flag("stream")
        # Absent: include the prompt without streaming, exclude it with streaming (NVIDIA's defaults).
        self.prepend = not inputs.flag("exclude_input_in_output", default=self.stream)
        if self.returns["return_prompt_logprobs"] and inputs.params.get("prompt_logprobs") is None:
            raise RequestError("return_prompt_logprobs needs the sampling parameter 'prompt_logprobs' (0 or more)")
        self.lora = ctx.adapters.take(inputs.params)  # NVIDIA's `lora_name`, taken before SamplingParams
        self.sampling = ctx.types.sampling_params(inputs.params)
        kind = ctx.types.RequestOutputKind
        self.sampling.output_kind = kind.DELTA if self.stream else kind.FINAL_ONLY

    async def body(self, ctx: Context, sender: Any, ticket: Any) -> bool:
        engine = ctx.host.engine
        if isinstance(self.prompt, list):
            prefix = engine.get_tokenizer().decode(self.prompt) if self.prepend else ""
            engine_input = await ctx.host.render_tokens(self.prompt)
        else:
            prefix = self.prompt if self.prepend else ""
            engine_input = await ctx.host.render(self.prompt)
        async for output in engine.generate(engine_input, self.sampling, self.request_id, lora_request=self.lora):
            if ticket.done():
                return False
            if self.stream or output.finished:
                ctx.responses.step(Step(sender, output, prefix, self.returns, self.request_id))
                prefix = ""
                if output.finished:
                    return True
        return False


def generate_response(output: Any, prefix: str, returns: dict[str, bool], output_dtype: Any) -> Any:
    """text_output plus the additional outputs the request asked for; with streaming each response carries
    the delta's tokens and logprobs (vLLM's DELTA outputs), as NVIDIA's backend."""
    completions = output.outputs
    tensors = [pb_utils.Tensor("text_output", np.asarray(
        [(prefix + c.text).encode("utf-8") for c in completions], dtype=output_dtype))]
    if returns["return_finish_reason"]:
        tensors.append(pb_utils.Tensor("finish_reason", np.asarray(
            [str(c.finish_reason).encode() if c.finish_reason is not None else b"" for c in completions],
            dtype=np.object_)))
    if returns["return_cumulative_logprob"]:
        tensors.append(pb_utils.Tensor("cumulative_logprob", np.asarray(
            [c.cumulative_logprob if c.cumulative_logprob is not None else np.nan for c in completions],
            dtype=np.float32)))
    if returns["return_logprobs"]:
        tensors.append(pb_utils.Tensor("logprobs", np.asarray(
            [logprobs_json(c.logprobs).encode() for c in completions], dtype=np.object_)))
    if returns["return_num_input_tokens"]:
        tensors.append(pb_utils.Tensor("num_input_tokens", np.asarray(
            [len(output.prompt_token_ids or ())], dtype=np.uint32)))
    if returns["return_num_output_tokens"]:
        tensors.append(pb_utils.Tensor("num_output_tokens", np.asarray(
            [len(c.token_ids) for c in completions], dtype=np.uint32)))
    if returns["return_prompt_logprobs"]:  # vLLM gives them once: with the first streamed step, or the final one
        rows = prompt_logprobs_json(output.prompt_logprobs, output.prompt_token_ids or [])
        tensors.append(pb_utils.Tensor("prompt_logprobs", np.asarray([rows.encode()], dtype=np.object_)))
    return pb_utils.InferenceResponse(output_tensors=tensors)


def input_token_ids(request: Any, name: str) -> list[int] | None:
    """An INT64 token-id input; absent or empty: None. vLLM checks the ids against the vocabulary."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    ids = [int(t) for t in tensor.as_numpy().reshape(-1)]
    if any(t < 0 or t >= 2**31 for t in ids):
        raise RequestError(f"input '{name}' holds a negative or too large token id")
    return ids or None
