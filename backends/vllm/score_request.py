"""Prefill-only scoring: `text_input` (the context) + `candidates` -> `candidate_logprobs`, the sum of
log P(token | prefix) over each candidate's tokens, from one prefill per candidate (batched by vLLM)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from contract import RETURN_FLAGS
from request_base import BaseRequest, Context, RequestError, RequestInputs, quietly
from request_params import candidate_logprob

OWN_KEYS = {"max_tokens", "prompt_logprobs", "n", "structured_outputs"}  # set by the scoring itself


class ScoreRequest(BaseRequest):
    def __init__(self, inputs: RequestInputs, candidates: list[str]) -> None:
        super().__init__()
        for name in RETURN_FLAGS:  # read as for generation, so a malformed one is the same error
            inputs.flag(name)
        if inputs.flag("stream"):
            raise RequestError("scoring 'candidates' is one forward pass: 'stream' must be false")
        forbidden = sorted(set(inputs.params) & OWN_KEYS)
        if forbidden:
            raise RequestError(f"scoring sets {', '.join(map(repr, forbidden))} itself; do not send them")
        if not candidates:
            raise RequestError("input 'candidates' is empty")
        self.prompt, self.candidates, self.params = inputs.prompt, candidates, inputs.params

    async def body(self, ctx: Context, sender: Any, ticket: Any) -> bool:
        """Each candidate is one request over prompt+candidate token ids with max_tokens=1 and
        prompt_logprobs=0, so the engine runs the prefill and reports log P(token | prefix) for every prompt
        position; the candidate's score is the sum over its own positions. The one sampled token is discarded."""
        engine = ctx.host.engine
        sub_ids = [f"{self.request_id}-{i}" for i in range(len(self.candidates))]
        tokenizer = engine.get_tokenizer()
        prompt_ids = list(tokenizer.encode(self.prompt))
        sampling = ctx.types.sampling_params({**self.params, "max_tokens": 1, "prompt_logprobs": 0})
        sampling.output_kind = ctx.types.RequestOutputKind.FINAL_ONLY

        async def one(sub_id: str, text: str) -> float:
            cand_ids = list(tokenizer.encode(text, add_special_tokens=False))
            if not cand_ids:
                raise RequestError(f"candidate {text!r} has no tokens")
            engine_input = await ctx.host.render_tokens(prompt_ids + cand_ids)
            final = None
            async for output in engine.generate(engine_input, sampling, sub_id):
                final = output
            if final is None or final.prompt_logprobs is None:
                raise RequestError("vLLM returned no prompt log-probabilities")
            return candidate_logprob(final.prompt_logprobs, len(prompt_ids), cand_ids)

        tasks = [asyncio.create_task(one(s, c)) for s, c in zip(sub_ids, self.candidates, strict=True)]
        try:
            scores = await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await quietly(engine.abort(sub_ids))
            raise
        if ticket.done():
            return False
        ctx.responses.respond(sender, pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("candidate_logprobs", np.asarray(scores, dtype=np.float32)),
            pb_utils.Tensor("num_input_tokens", np.asarray([len(prompt_ids)], dtype=np.uint32)),
        ]))
        return True
