"""First-come-first-served batching under a token budget. A request's sequences join one FIFO pool;
the engine takes sequences from its head while they fit the budget, so a batch holds as many tokens as
the budget allows whatever the sequence count, and a request's latency follows its tokens."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class Ticket:
    """One request: its sequences' results fill `values` row by row; `done` is set once all are in (or
    on error). `on_done` callbacks run in the thread that completes the ticket."""

    def __init__(self, sequences: Sequence[Sequence[int]], options: Any = None,
                 on_done: Callable[[Ticket], None] | None = None,
                 type_starts: Sequence[int | None] | None = None) -> None:
        self.sequences = [list(s) for s in sequences]
        self.options = options
        self.type_starts = list(type_starts) if type_starts is not None else None
        self.values: np.ndarray | None = None
        self.error: BaseException | None = None
        self.submitted = time.perf_counter()
        self._remaining = len(self.sequences)
        self._done = threading.Event()
        self._callbacks = [on_done] if on_done else []
        self._lock = threading.Lock()

    @property
    def num_tokens(self) -> int:
        return sum(len(s) for s in self.sequences)

    def type_start(self, index: int) -> int | None:
        return self.type_starts[index] if self.type_starts is not None else None

    def fill(self, index: int, row: np.ndarray) -> None:
        with self._lock:
            if self.values is None:
                self.values = np.empty((len(self.sequences), row.shape[-1]), dtype=row.dtype)
            self.values[index] = row
            self._remaining -= 1
            finished = self._remaining == 0
        if finished:
            self._finish()

    def fail(self, error: BaseException) -> None:
        with self._lock:
            if self._done.is_set() or self.error is not None:
                return
            self.error = error
        self._finish()

    def _finish(self) -> None:
        self._done.set()
        for cb in self._callbacks:
            cb(self)

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> np.ndarray:
        if not self._done.wait(timeout):
            raise TimeoutError(f"no result after {timeout} s")
        if self.error is not None:
            raise self.error
        if self.values is not None:
            return self.values
        if self.sequences:
            raise RuntimeError("the work finished with neither its values nor an error")
        return np.zeros((0, 0), dtype=np.float32)


@dataclass
class Work:
    """One sequence of a ticket, waiting in the pool."""

    ticket: Ticket
    index: int
    ids: list[int] = field(repr=False)


class TokenBudgetBatcher:
    """The pool of pending sequences. `next_batch` blocks until something is pending, then takes from
    the head in arrival order while the budget holds (always at least one sequence, so a sequence
    longer than the budget runs alone); it never skips ahead, so nothing starves."""

    def __init__(self, token_budget: int, max_sequences: int | None = None) -> None:
        if token_budget < 1:
            raise ValueError("token_budget must be at least 1")
        self.token_budget = token_budget
        self.max_sequences = max_sequences
        self._pool: collections.deque[Work] = collections.deque()
        self._pending_tokens = 0
        self._cond = threading.Condition()
        self._closed = False

    def submit(self, ticket: Ticket) -> Ticket:
        with self._cond:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            for i, ids in enumerate(ticket.sequences):
                self._pool.append(Work(ticket, i, ids))
                self._pending_tokens += len(ids)
            self._cond.notify()
        if not ticket.sequences:
            ticket._finish()
        return ticket

    @property
    def pending_tokens(self) -> int:
        return self._pending_tokens

    def __len__(self) -> int:
        return len(self._pool)

    def take(self) -> list[Work]:
        """The next batch, or [] when nothing is pending (does not block)."""
        with self._cond:
            return self._take_locked()

    def _take_locked(self) -> list[Work]:
        batch: list[Work] = []
        tokens = 0
        while self._pool:
            head = self._pool[0]
            if head.ticket.error is not None:  # a failed request's other sequences are dropped
                self._pool.popleft()
                self._pending_tokens -= len(head.ids)
                continue
            n = len(head.ids)
            if batch and (tokens + n > self.token_budget
                          or (self.max_sequences is not None and len(batch) >= self.max_sequences)):
                break
            batch.append(self._pool.popleft())
            tokens += n
            self._pending_tokens -= n
        if batch:
            self._cond.notify_all()  # wakes wait_below
        return batch

    def next_batch(self, timeout: float | None = None) -> list[Work]:
        """Block until work is pending (or `timeout`, or close), then take a batch."""
        with self._cond:
            self._cond.wait_for(lambda: self._pool or self._closed, timeout)
            return self._take_locked()

    def wait_below(self, tokens: int, timeout: float | None = None) -> bool:
        """Block while `tokens` or more are pending: a Triton instance that waits here before taking more
        requests lets Triton hand them to an idler instance."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending_tokens < tokens or self._closed, timeout)

    def close(self) -> list[Work]:
        """Stop accepting work; returns what was still pending."""
        with self._cond:
            self._closed = True
            left = list(self._pool)
            self._pool.clear()
            self._pending_tokens = 0
            self._cond.notify_all()
        return left

    @property
    def closed(self) -> bool:
        return self._closed
