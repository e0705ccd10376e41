"""Notice cancelled requests without slowing the ones that are not.

Triton 2.51's Python backend has no cancellation callback: a model must poll
`response_sender.is_cancelled()`, a round trip to the server process. One poll task per request
every 0.2 s (the first design) cost 40% of the tokens/s at 16 concurrent streams on 2 cores, so
one thread now polls every in-flight request once per interval.

The poll must never overlap the request's final response: Triton frees the response factory once
the final flag is sent, and an `is_cancelled()` running then reads freed memory (seen: SIGSEGV in
TRITONBACKEND_ResponseFactoryIsCancelled under 16 concurrent HTTP streams). Each ticket's lock
orders the two, and a ticket whose final response went out is never polled again.

Streams are also polled once per engine step, just before vLLM's output processor takes that step's outputs
(`poll_before_outputs`): a stream found cancelled there is aborted in the output processor before the step
is counted or detokenized, as `vllm serve` aborts a request whose client left, so no token of a step the
client can no longer receive is generated on its behalf. A stream is asked once every `step_every` of its
steps (the model's default 2), not at each: each ask is a round trip through the stub and tritonserver, so asking
at every step cost one round trip per streamed token beside the token's own response (bench/response_floor.py).
A hang-up then costs at most that many steps of the stream, whatever the engine's pace.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Any


class Ticket:
    """One in-flight request. `done()` is True once the client is known to have gone away."""

    __slots__ = ("_cancelled", "_final_sent", "_lock", "key", "sender", "steps_unasked", "streamed")

    def __init__(self, key: Hashable, sender: Any, streamed: bool = False) -> None:
        self.key = key
        self.sender = sender
        self.streamed = streamed
        self._lock = threading.Lock()
        self._final_sent = False
        self._cancelled = False
        self.steps_unasked = 1 << 30  # steps since the step poll last asked: the first step asks

    def done(self) -> bool:
        return self._cancelled

    def poll(self) -> bool:
        """Ask Triton once; True when the request was cancelled (and not finished) just now."""
        with self._lock:
            if self._final_sent or self._cancelled:
                return False
            self._cancelled = bool(self.sender.is_cancelled())
            return self._cancelled

    def abandon(self) -> None:
        """The backend has answered the request itself (its engine died): treat it as gone."""
        with self._lock:
            self._cancelled = True

    def send_final(self, send: Callable[[], None]) -> None:
        with self._lock:
            self._final_sent = True
            send()


class CancelWatch:
    """Polls the registered tickets every `interval` seconds from one daemon thread and calls
    `on_cancel(key)` for each request whose client went away; `poll_streams` asks a stream once every
    `step_every` of its steps."""

    def __init__(self, interval: float, on_cancel: Callable[[Hashable], None],
                 on_error: Callable[[str], None] = lambda message: None, step_every: int = 1) -> None:
        self.interval = interval
        self.step_every = max(1, step_every)
        self._on_cancel = on_cancel
        self._on_error = on_error
        self._tickets: dict[Hashable, Ticket] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vllm-cancel-watch", daemon=True)
        self._thread.start()

    def register(self, key: Hashable, sender: Any, streamed: bool = False) -> Ticket:
        ticket = Ticket(key, sender, streamed)
        with self._lock:
            self._tickets[key] = ticket
        return ticket

    def release(self, key: Hashable) -> None:
        with self._lock:
            self._tickets.pop(key, None)

    def __len__(self) -> int:
        return len(self._tickets)

    def sweep(self) -> list[Hashable]:
        """Poll every ticket once; returns (and reports) the keys found cancelled."""
        with self._lock:
            tickets = list(self._tickets.values())
        cancelled = self._poll(tickets)
        for key in cancelled:
            self._on_cancel(key)
        return cancelled

    def poll_streams(self, keys: Iterable[Hashable]) -> list[Hashable]:
        """Count a step for each streamed ticket among `keys` and poll those not asked in their last
        `step_every` - 1 steps; returns those found cancelled just now (not reported to on_cancel: the caller
        aborts them itself)."""
        tickets, every, due = self._tickets, self.step_every, []
        for ticket in map(tickets.get, keys):
            if ticket is not None and ticket.streamed:
                ticket.steps_unasked += 1
                if ticket.steps_unasked >= every:
                    ticket.steps_unasked = 0
                    due.append(ticket)
        return self._poll(due)

    def _poll(self, tickets: list[Ticket]) -> list[Hashable]:
        cancelled = []
        for ticket in tickets:
            try:
                if ticket.poll():
                    cancelled.append(ticket.key)
            except Exception as exc:  # a sender Triton already dropped: nothing left to poll
                self._on_error(f"cancellation poll of {ticket.key}: {exc}")
                self.release(ticket.key)
        return cancelled

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=max(1.0, 2 * self.interval))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sweep()


def poll_before_outputs(output_processor: Any, watch: CancelWatch, abort_in_core: Callable[[list[str]], None],
                        on_cancel: Callable[[list[Hashable]], None]) -> bool:
    """Wrap vLLM V1's `OutputProcessor.process_outputs` (called by AsyncLLM's output handler on the engine's
    loop with each step's outputs) so that the streams in a step are polled first and the cancelled ones
    aborted there: `abort_requests` drops their state, so process_outputs skips (and does not count) their
    tokens and ends their generate() with an abort output; `abort_in_core(internal_ids)` then stops them
    in the engine core. False (and nothing changed) where this vLLM's output processor lacks the parts."""
    process = getattr(output_processor, "process_outputs", None)
    states = getattr(output_processor, "request_states", None)
    abort = getattr(output_processor, "abort_requests", None)
    if process is None or not isinstance(states, dict) or abort is None:
        return False

    def process_outputs(outputs: Any, *args: Any, **kwargs: Any) -> Any:
        if len(watch):
            keys = []
            for output in outputs:
                state = states.get(output.request_id)
                if state is not None:
                    keys.append(getattr(state, "external_req_id", output.request_id))
            gone = watch.poll_streams(keys)
            if gone:
                internal = abort([str(key) for key in gone], internal=False)
                if internal:
                    abort_in_core(list(internal))
                on_cancel(gone)
        return process(outputs, *args, **kwargs)

    output_processor.process_outputs = process_outputs
    return True
