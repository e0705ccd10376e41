"""Embeddings (pooling runner): `text_input` + `pooling_parameters`, or NVIDIA's `embedding_request`, ->
`embedding` (FP32) and `num_input_tokens`."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from request_base import BaseRequest, Context, RequestError, RequestInputs, input_string, json_object

EMBEDDING_REQUEST_KEYS = ("input", "pooling_params")


class EmbedRequest(BaseRequest):
    def __init__(self, prompt: str | list[int], pooling: Any, as_text: bool) -> None:
        super().__init__()
        # as_text (NVIDIA's embedding_request): the vector also goes out as a JSON list in text_output.
        self.prompt, self.pooling, self.as_text = prompt, pooling, as_text

    @classmethod
    def parse(cls, inputs: RequestInputs, ctx: Context) -> EmbedRequest:
        embedding_request = input_string(inputs.request, "embedding_request")
        if embedding_request is not None:
            return cls.from_embedding_request(embedding_request, inputs.params, ctx)
        pooling_raw = input_string(inputs.request, "pooling_parameters")
        pooling = json_object(pooling_raw, "pooling_parameters") if pooling_raw is not None else inputs.params
        if pooling_raw is not None and inputs.params:
            raise RequestError(f"an embedding model takes no sampling parameters, got "
                               f"{', '.join(map(repr, inputs.params))}")
        return cls(inputs.prompt, ctx.types.pooling_params(pooling), as_text=False)

    @classmethod
    def from_embedding_request(cls, raw: str, params: dict[str, Any], ctx: Context) -> EmbedRequest:
        """NVIDIA's `embedding_request`: text_input is ignored (NVIDIA's frontend sends "")."""
        if params:
            raise RequestError(f"input 'embedding_request' carries the pooling parameters; got "
                               f"{', '.join(repr(k[:40]) for k in list(params)[:5])} beside it")
        body = json_object(raw, "embedding_request")
        unknown = sorted(k for k in body if k not in EMBEDDING_REQUEST_KEYS)
        if unknown:
            raise RequestError(f"embedding_request: unknown key(s) {', '.join(repr(k[:40]) for k in unknown[:5])}; "
                               f"accepted: {', '.join(EMBEDDING_REQUEST_KEYS)}")
        prompt = body.get("input")
        if isinstance(prompt, list) and prompt and all(type(t) is int and 0 <= t < 2**31 for t in prompt):
            prompt = [int(t) for t in prompt]
        elif not isinstance(prompt, str):
            raise RequestError("embedding_request 'input' must be a string or a non-empty list of token ids")
        pooling = body.get("pooling_params") or {}
        if not isinstance(pooling, dict):
            raise RequestError("embedding_request 'pooling_params' must be a JSON object")
        dims = pooling.get("dimensions")
        if isinstance(dims, list) and len(dims) == 1:  # NVIDIA's frontend sends [n]
            pooling = {**pooling, "dimensions": dims[0]}
        return cls(prompt, ctx.types.pooling_params(pooling), as_text=True)

    async def body(self, ctx: Context, sender: Any, ticket: Any) -> bool:
        engine = ctx.host.engine
        final = None
        engine_input = await (ctx.host.render_tokens(self.prompt) if isinstance(self.prompt, list)
                              else ctx.host.render(self.prompt))
        async for output in engine.encode(engine_input, self.pooling, self.request_id):
            final = output
        if ticket.done() or final is None:
            return False
        vector = final.outputs.data.detach().float().cpu().numpy().reshape(-1).astype(np.float32)
        tensors = [
            pb_utils.Tensor("embedding", vector),
            pb_utils.Tensor("num_input_tokens", np.asarray([len(final.prompt_token_ids or ())], dtype=np.uint32)),
        ]
        if self.as_text:
            tensors.append(pb_utils.Tensor("text_output", np.asarray(
                [json.dumps(vector.tolist()).encode()], dtype=ctx.output_dtype)))
        ctx.responses.respond(sender, pb_utils.InferenceResponse(output_tensors=tensors))
        return True
