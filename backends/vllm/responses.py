"""The response side: every response goes out from one thread, in order, so a slow client never stalls
vLLM's event loop. Streamed steps that queued up behind a send go out merged (stream_merge); before each
streamed response the client is asked whether it is still there (cancellation within an engine step)."""

from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Callable
from typing import Any

import triton_python_backend_utils as pb_utils
from stream_merge import Step, coalesce

CLOSE_TIMEOUT_S = 30.0


class ResponseQueue:
    def __init__(self, build_step: Callable[[Step], Any], abort: Callable[[str], None],
                 on_cancel: Callable[[str], None], logger: Any, merge: bool = True) -> None:
        self._build_step, self._abort, self._on_cancel = build_step, abort, on_cancel
        self.logger, self.merge = logger, merge
        self._queue: queue.SimpleQueue = queue.SimpleQueue()  # put() in C: no Condition per step
        self._failed: set[int] = set()  # senders whose response could not be built: their steps are dropped
        self.tickets: dict[int, Any] = {}  # id(sender) -> its CancelWatch ticket, until the final response
        self.poll_at_send = True  # False once streams are polled before each engine step instead
        self._thread = threading.Thread(target=self._send_loop, name="vllm-responses", daemon=True)
        self._thread.start()

    # -- queueing (any thread) -------------------------------------------------------------------
    def step(self, step: Step) -> None:
        self._queue.put(step)

    def respond(self, sender: Any, response: Any) -> None:
        """A request's one and final response."""
        self._queue.put((sender, response, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL))

    def final(self, sender: Any, cancelled: bool) -> None:
        """The bare final flag (with Triton's CANCELLED error when the client left)."""
        response = None
        if cancelled:
            code = getattr(pb_utils.TritonError, "CANCELLED", None)
            error = pb_utils.TritonError("[vllm] request cancelled", code) if code is not None else None
            response = pb_utils.InferenceResponse(error=error) if error is not None else None
        self._queue.put((sender, response, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL))

    def error(self, sender: Any, message: str, code: str = "INTERNAL") -> None:
        """`code` names a pb_utils.TritonError code: INVALID_ARG (Triton answers HTTP 400), UNAVAILABLE (503),
        INTERNAL (500, the backend's own failures only)."""
        number = getattr(pb_utils.TritonError, code, None)
        error = (pb_utils.TritonError(f"[vllm] {message}", number) if number is not None
                 else pb_utils.TritonError(f"[vllm] {message}"))
        self.respond(sender, pb_utils.InferenceResponse(error=error))

    def close(self) -> None:
        """Send what is queued, then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout=CLOSE_TIMEOUT_S)

    # -- the sending thread ----------------------------------------------------------------------
    def _send_loop(self) -> None:
        while self._send_batch(self._take_batch()):
            pass

    def _take_batch(self) -> list:
        """What is queued: blocks for the first item, then takes what queued behind it."""
        batch = [self._queue.get()]
        while batch[-1] is not None:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _send_batch(self, batch: list) -> bool:
        """Send one batch; False at the close sentinel. Its own frame, so nothing of the batch outlives it while the
        loop waits: Triton frees a request's response factory, which holds the model, only once the stub's
        sender object is destroyed."""
        items = [item for item in batch if item is not None]
        for item in coalesce(items) if self.merge else items:
            self._send_item(item)
        return batch[-1] is not None

    def _send_item(self, item: Any) -> None:
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if isinstance(item, Step):
            sender, flags = item.sender, final if item.final else 0
        else:
            sender, response, flags = item
        if id(sender) in self._failed:
            if flags & final:
                self._failed.discard(id(sender))
            return
        if isinstance(item, Step):
            if not flags and self._cancelled_before_send(sender, item.request_id):
                return
            try:
                response = self._build_step(item)
            except Exception as exc:
                self.logger.log_error(f"[vllm] request {item.request_id}: {traceback.format_exc()}")
                response = pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"[vllm] could not build the response: {type(exc).__name__}: {exc}"))
                if not flags:
                    self._failed.add(id(sender))  # its later steps are dropped until its final one
                    self._abort(item.request_id)
                flags = final
        ticket = self.tickets.pop(id(sender), None) if flags & final else None
        try:
            if ticket is None:
                _send(sender, response, flags)
            else:
                ticket.send_final(lambda: _send(sender, response, flags))
        except Exception:
            self.logger.log_error(f"[vllm] could not send a response: {traceback.format_exc()}")

    def _cancelled_before_send(self, sender: Any, request_id: str) -> bool:
        """Before each streamed (non-final) response: has the client gone? Where streams are not polled
        before each engine step (cancellation.poll_before_outputs), one is_cancelled() round trip per
        response, from this thread, so a stream is aborted within one engine step of the hang-up (the cancel
        watch's sweep covers requests that send nothing until their end). A cancelled
        stream's remaining steps are dropped; its body ends at the next output and sends the final."""
        ticket = self.tickets.get(id(sender))
        if ticket is None:
            return False
        if ticket.done():
            return True
        if not self.poll_at_send:
            return False
        try:
            cancelled = ticket.poll()
        except Exception:  # a sender Triton already dropped: the send below reports it
            return False
        if cancelled:
            self._on_cancel(request_id)
        return cancelled


def _send(sender: Any, response: Any, flags: int) -> None:
    if response is None:
        sender.send(flags=flags)
    else:
        sender.send(response, flags=flags)
