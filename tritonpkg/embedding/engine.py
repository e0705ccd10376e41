"""The engine loop: one worker thread takes token-budget batches from the pool, packs them, runs the
encoder (through CUDA graphs on a GPU) and hands results back per request.

On a GPU the loop overlaps CPU and GPU work: it launches batch N+1 before it reads batch N's result,
whose copy to host is tracked by an event-backed handle, so packing and result delivery hide behind
the forward pass."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from .batcher import Ticket, TokenBudgetBatcher, Work
from .encoder import PackedBert
from .errors import EmbeddingInputError
from .graphs import BucketCache, GraphRunner, bucket_tokens
from .handles import ResultHandle
from .packing import pack


class EmbeddingEngine:
    def __init__(self, model: PackedBert, token_budget: int = 512, *, max_sequences: int | None = None,
                 cuda_graphs: bool = True, graph_max_tokens: int = 2048) -> None:
        self.model = model
        self.device = model.word.device
        self.batcher = TokenBudgetBatcher(token_budget, max_sequences)
        self.graphs: GraphRunner | None = None
        if self.device.type == "cuda" and cuda_graphs:
            self.graphs = GraphRunner(model.encode_static, BucketCache(max_tokens=graph_max_tokens))
        self.batches = 0
        self._thread = threading.Thread(target=self._loop, name="embedding-engine", daemon=True)
        self._start_lock = threading.Lock()

    def _ensure_started(self) -> None:
        """The worker starts with the first request, not in the constructor: a Python thread running while
        Triton's stub answers initialize() was seen to leave the model loading forever."""
        if not self._thread.is_alive() and self._thread.ident is None:
            with self._start_lock:
                if self._thread.ident is None:
                    self._thread.start()

    @property
    def token_budget(self) -> int:
        return self.batcher.token_budget

    def submit(self, sequences: Sequence[Sequence[int]], options: Any = None,
               on_done: Callable[[Ticket], None] | None = None,
               type_starts: Sequence[int | None] | None = None) -> Ticket:
        """`type_starts` (sentence pairs, for a cross-encoder): where each sequence's second segment begins."""
        for i, s in enumerate(sequences):
            if not s:
                raise EmbeddingInputError(f"input {i} is empty", field=f"input[{i}]", expected="at least one token")
            if len(s) > self.model.max_positions:
                raise EmbeddingInputError(
                    f"input {i} has {len(s)} tokens, more than the model's {self.model.max_positions} positions",
                    field=f"input[{i}]", expected=f"at most {self.model.max_positions} tokens")
        self._ensure_started()
        return self.batcher.submit(Ticket(sequences, options, on_done, type_starts))

    def embed(self, sequences: Sequence[Sequence[int]], timeout: float | None = None) -> np.ndarray:
        """Mean-pooled vectors of `sequences`, in order (blocking)."""
        return self.submit(sequences).wait(timeout)

    def close(self) -> None:
        for work in self.batcher.close():
            work.ticket.fail(RuntimeError("the engine was stopped before this request ran"))
        if self._thread.ident is not None:
            self._thread.join(timeout=10)

    def _launch(self, batch: list[Work]) -> ResultHandle:
        seqs = [w.ids for w in batch]
        types = [w.ticket.type_start(w.index) for w in batch] if self.model.head == "classifier" else None
        if self.graphs is not None:
            total = sum(len(s) for s in seqs)
            padded = bucket_tokens(total)
            if padded <= self.graphs.cache.max_tokens:
                return ResultHandle(self.graphs.run(pack(seqs, pad_to=padded, type_starts=types).to(self.device)))
        return ResultHandle(self.model.encode(pack(seqs, type_starts=types)))

    @staticmethod
    def _deliver(batch: list[Work], handle: ResultHandle) -> None:
        values = handle.result().float().numpy()
        for row, work in enumerate(batch):
            work.ticket.fill(work.index, values[row])

    @staticmethod
    def _fail(batch: list[Work], error: BaseException) -> None:
        for work in batch:
            work.ticket.fail(error)

    def _loop(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # per host thread: graphs and streams belong to the model's GPU
        pending: tuple[list[Work], ResultHandle] | None = None
        while not self.batcher.closed or pending:
            batch = self.batcher.take() if pending else self.batcher.next_batch(timeout=0.5)
            launched = None
            if batch:
                try:
                    launched = (batch, self._launch(batch))
                    self.batches += 1
                except Exception as exc:  # a failing batch fails its requests, not the engine
                    self._fail(batch, exc)
            if pending:
                try:
                    self._deliver(*pending)
                except Exception as exc:
                    self._fail(pending[0], exc)
            pending = launched
