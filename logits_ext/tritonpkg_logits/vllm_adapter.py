"""The vLLM logits processor: one class that implements both model runners' interfaces.

vLLM loads every class in the ``vllm.logits_processors`` entry-point group; the V2 runner (the
default on GPUs with vLLM >= 0.32, the only one from 0.34) rejects classes that aren't V2 processors and the
V1 runner (CPU, up to 0.33) calls the V1 methods, so the class subclasses the ABCs the installed vLLM has and
tells the runners apart by constructor arguments (V1: a torch.device; V2: the runner's request-state view).

Per-request specs come from ``SamplingParams.extra_args["constraint"]`` (the OpenAI server's
``vllm_xargs``); requests without one are left untouched.

Why the V1 path is safe under chunked prefill, preemption and async scheduling: a row's state is a
function of the *real* ids in its live output list only. Partial-prefill rows have no new output ids,
so they never advance (their masked sample is discarded by vLLM anyway); a re-added request restarts
from its full list; a list that shrank (or whose last consumed id changed) is replayed; ``-1``
placeholders stop consumption until vLLM patches them, and the engine reads the lists inside
``apply()``, after vLLM has patched them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch

try:  # the V1 runner's interface: vLLM 0.10.2 ... 0.33 (0.34 removed vllm/v1/sample/logits_processor/)
    from vllm.v1.sample.logits_processor import BatchUpdate
    from vllm.v1.sample.logits_processor import LogitsProcessor as V1LogitsProcessor
    from vllm.v1.sample.logits_processor.interface import MoveDirectionality
except ImportError:  # vLLM >= 0.34: V2 only
    V1LogitsProcessor = None  # type: ignore[misc,assignment]
    BatchUpdate = Any  # type: ignore[misc,assignment]
    MoveDirectionality = None  # type: ignore[misc,assignment]

try:  # the V2 runner's interface exists from vLLM 0.32
    from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcessor as V2LogitsProcessor
except ImportError:  # pragma: no cover - older vLLM: V1 only
    V2LogitsProcessor = None  # type: ignore[misc,assignment]

from tritonpkg_logits.engine import Engine
from tritonpkg_logits.spec import SpecError, from_extra_args

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.config import VllmConfig

log = logging.getLogger("tritonpkg_logits")
_BASES: tuple[type, ...] = tuple(b for b in (V1LogitsProcessor, V2LogitsProcessor) if b is not None)
if not _BASES:
    raise ImportError("this vLLM has neither the V1 (vllm.v1.sample.logits_processor) nor the V2 "
                      "(vllm.v1.worker.gpu.sample.logits_processor) logits-processor interface")
EOS_ONLY = {"type": "allow", "tokens": [], "eos": True}


def _eos_ids(vllm_config: VllmConfig, tokenizer) -> list[int]:
    ids: set[int] = set()
    for src in (getattr(vllm_config.model_config.hf_config, "eos_token_id", None),
                getattr(tokenizer, "eos_token_id", None)):
        if isinstance(src, int):
            ids.add(src)
        elif isinstance(src, (list, tuple)):
            ids.update(int(x) for x in src)
    return sorted(ids)


def _load_tokenizer(vllm_config: VllmConfig):
    mc = vllm_config.model_config
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(mc.tokenizer, trust_remote_code=mc.trust_remote_code,
                                             revision=mc.tokenizer_revision)
    except Exception as exc:  # choice constraints become unavailable; the others still work
        log.warning("tritonpkg_logits: no tokenizer (%s); 'choice' constraints will end requests at once", exc)
        return None


def build_engine(vllm_config: VllmConfig) -> Engine:
    from tritonpkg_logits.vocab import token_bytes

    vocab = vllm_config.model_config.get_vocab_size()
    tok = _load_tokenizer(vllm_config)
    eos = _eos_ids(vllm_config, tok)
    if not eos:
        raise ValueError("tritonpkg_logits: the model declares no EOS token id")
    return Engine(vocab, eos, token_bytes(tok, vocab) if tok is not None else ())


class ConstraintLogitsProcessor(*_BASES):  # type: ignore[misc]
    """Token-level constraints (DFA, choice, n-gram, allow/ban lists) for vLLM's V1 and V2 runners (whichever
    of the two interfaces the installed vLLM has)."""

    def __init__(self, vllm_config: VllmConfig, device_or_state: Any, is_pin_memory: bool = False) -> None:
        # Installed as a plugin, this runs in every vLLM engine of the environment: a model it cannot
        # serve (no EOS id, odd config) must not stop that engine, only its constrained requests.
        try:
            self.engine: Engine | None = build_engine(vllm_config)
        except Exception as exc:
            log.error("tritonpkg_logits: disabled for this model (%s); constrained requests run unconstrained", exc)
            self.engine = None
        self.v2 = not isinstance(device_or_state, torch.device)
        self.req_states = device_or_state if self.v2 else None
        self.active: set[int] = set()
        self.warned_stale = False

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        """Reject a malformed spec at admission (ValueError -> HTTP 400 in vLLM's server)."""
        from_extra_args(sampling_params.extra_args)

    def is_argmax_invariant(self) -> bool:
        return False  # it changes which token wins, so greedy batches must not skip it

    def _handle(self, params: SamplingParams) -> int | None:
        if self.engine is None:
            if from_extra_args(params.extra_args) is not None:
                log.error("tritonpkg_logits: a constrained request reached a disabled processor; it runs unconstrained")
            return None
        try:
            spec = from_extra_args(params.extra_args)
            return None if spec is None else self.engine.compile(spec)
        except (SpecError, ValueError) as exc:
            # Admission checks structure only; range errors surface here, where raising would kill
            # the engine: end that request at once instead.
            log.error("tritonpkg_logits: constraint rejected in the worker (%s); the request may only emit EOS", exc)
            return self.engine.compile(EOS_ONLY)

    # ---- V1 runner ----
    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None or self.engine is None:
            return
        eng, active = self.engine, self.active
        for i in batch_update.removed:
            eng.clear_row(i)
            active.discard(i)
        for index, params, _prompt, output_ids in batch_update.added:
            # Overwrite: the slot may still hold a finished request that was never "removed".
            handle = self._handle(params)
            if handle is None:
                eng.clear_row(index)
                active.discard(index)
            else:
                eng.set_row(index, handle, output_ids)
                active.add(index)
        for a, b, direction in batch_update.moved:
            if direction == MoveDirectionality.SWAP:
                eng.swap_rows(a, b)
                in_a, in_b = a in active, b in active
                (active.add if in_b else active.discard)(a)
                (active.add if in_a else active.discard)(b)
            else:
                eng.move_row(a, b)
                (active.add if a in active else active.discard)(b)
                active.discard(a)

    def apply(self, logits: torch.Tensor, ctx: Any = None) -> torch.Tensor:
        if ctx is not None:
            return self._apply_v2(logits, ctx)
        if not self.active or self.engine is None:
            return logits
        stale = self.engine.apply_any(logits)
        if stale and not self.warned_stale:
            self.warned_stale = True
            log.warning(
                "tritonpkg_logits: %d row(s) still held async-scheduling placeholders in apply(); vLLM patches "
                "them only when a processor is passed as the `logits_processors` engine arg (or with "
                "async scheduling off). Those rows were masked for their previous state.",
                stale,
            )
        return logits

    # ---- V2 runner (GPU only in vLLM 0.32; unit-tested with a stand-in context on the CPU) ----
    def add_request(self, req_idx: int, sampling_params: SamplingParams) -> bool:
        if self.engine is None:
            return False
        handle = self._handle(sampling_params)
        if handle is None:
            self.engine.clear_row(req_idx)
            self.active.discard(req_idx)
            return False
        self.engine.set_row(req_idx, handle, None)
        self.active.add(req_idx)
        return True

    def _apply_v2(self, logits: torch.Tensor, ctx: Any) -> torch.Tensor:
        eng, rs = self.engine, self.req_states
        if not self.active or eng is None or rs is None:
            return logits
        # One device->host copy (one sync) for the three per-row vectors instead of three.
        mapping, pos, input_ids = torch.stack(
            (ctx.expanded_idx_mapping.long(), ctx.pos.long(), ctx.input_ids.long())).tolist()
        prompt_len, prefill_len = rs.prompt_len.np, rs.prefill_len.np
        slots = []
        for row, slot in enumerate(mapping):
            if slot not in self.active or pos[row] + 1 < int(prefill_len[slot]):
                slots.append(-1)  # unconstrained, or a partial-prefill row whose sample is discarded
                continue
            n_out = pos[row] + 1 - int(prompt_len[slot])  # output ids up to and including this input
            done = eng.consumed(slot)
            if n_out == done + 1 and n_out > 0:
                eng.feed(slot, [input_ids[row]])
            elif n_out != done:  # first step after (re)fill, or preemption: replay committed ids
                start = int(prompt_len[slot])
                eng.restart(slot, rs.all_token_ids.gpu[slot, start : start + n_out].tolist())
            slots.append(slot)
        eng.apply_any(logits, slots)
        return logits
