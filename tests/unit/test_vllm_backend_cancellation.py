"""backends/vllm/cancellation.py: one thread polls every in-flight request, and never polls a request
whose final response went out (Triton 2.51 frees the response factory then)."""

from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "backends" / "vllm" / "cancellation.py"
_spec = importlib.util.spec_from_file_location("vllm_backend_cancellation", SRC)
cancellation = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cancellation)


class Sender:
    """Stands in for Triton's response sender: counts polls, fails if polled after the final response."""

    def __init__(self, cancelled: bool = False) -> None:
        self.cancelled = cancelled
        self.polls = 0
        self.final = False

    def is_cancelled(self) -> bool:
        assert not self.final, "is_cancelled() after the final response: use after free in Triton 2.51"
        self.polls += 1
        return self.cancelled


def test_sweep_reports_each_cancelled_request_once():
    seen = []
    watch = cancellation.CancelWatch(3600, seen.append)
    try:
        live, gone = Sender(), Sender(cancelled=True)
        t_live, t_gone = watch.register("live", live), watch.register("gone", gone)
        assert watch.sweep() == ["gone"]
        assert watch.sweep() == []
        assert seen == ["gone"] and t_gone.done() and not t_live.done()
        assert live.polls == 2 and gone.polls == 1
    finally:
        watch.close()


def test_released_and_finished_requests_are_not_polled():
    watch = cancellation.CancelWatch(3600, lambda key: None)
    try:
        released, finished = Sender(), Sender()
        watch.register("released", released)
        ticket = watch.register("finished", finished)
        watch.release("released")

        def send():
            finished.final = True

        ticket.send_final(send)
        watch.sweep()
        assert released.polls == 0 and finished.polls == 0
    finally:
        watch.close()


def test_a_poll_and_the_final_response_never_overlap():
    """The poller thread races the sending thread; the ticket lock must order them."""

    class SlowSender(Sender):
        def is_cancelled(self) -> bool:
            result = super().is_cancelled()
            time.sleep(0.002)
            assert not self.final
            return result

    poll_errors: list[str] = []
    watch = cancellation.CancelWatch(0.0005, lambda key: None, poll_errors.append)
    try:
        senders = [SlowSender() for _ in range(50)]
        tickets = [watch.register(i, s) for i, s in enumerate(senders)]
        deadline = time.monotonic() + 5
        while min(s.polls for s in senders) < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        errors = []

        def finish(ticket, sender):
            try:
                ticket.send_final(lambda: setattr(sender, "final", True))
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=finish, args=pair) for pair in zip(tickets, senders, strict=False)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(0.01)
        assert not errors and not poll_errors
        assert all(s.final for s in senders)
    finally:
        watch.close()


def test_a_sender_that_fails_is_dropped_and_reported():
    class Broken(Sender):
        def is_cancelled(self) -> bool:
            raise RuntimeError("response factory gone")

    errors = []
    watch = cancellation.CancelWatch(3600, lambda key: None, errors.append)
    try:
        watch.register("broken", Broken())
        assert watch.sweep() == [] and len(watch) == 0
        assert "broken" in errors[0] and "factory gone" in errors[0]
    finally:
        watch.close()


def test_the_thread_polls_on_its_own():
    seen = threading.Event()
    watch = cancellation.CancelWatch(0.01, lambda key: seen.set())
    try:
        watch.register("x", Sender(cancelled=True))
        assert seen.wait(2)
    finally:
        watch.close()


def test_an_abandoned_ticket_is_done_and_never_polled_again():
    """The backend answered the request itself (its engine died): the body stops, nothing asks Triton."""
    watch = cancellation.CancelWatch(3600, lambda key: None)
    try:
        sender = Sender()
        ticket = watch.register("r", sender)
        ticket.abandon()
        assert ticket.done()
        assert watch.sweep() == [] and not ticket.poll()
        assert sender.polls == 0
    finally:
        watch.close()


class OutputProcessor:
    """The parts of vLLM V1's OutputProcessor the step poll uses: request_states keyed by internal id,
    abort_requests by external id (drops the states), process_outputs (records which outputs still had a
    state, i.e. which vLLM would count and send)."""

    def __init__(self, external_ids: list[str]) -> None:
        self.request_states = {f"{ext}-int": type("State", (), {"external_req_id": ext})() for ext in external_ids}
        self.aborted: list[str] = []
        self.counted: list[str] = []

    def abort_requests(self, request_ids, internal):
        assert internal is False
        dropped = []
        for ext in request_ids:
            self.aborted.append(ext)
            if self.request_states.pop(f"{ext}-int", None) is not None:
                dropped.append(f"{ext}-int")
        return dropped

    def process_outputs(self, outputs, timestamp=None, stats=None):
        self.counted += [o.request_id for o in outputs if o.request_id in self.request_states]
        return "processed"


class Output:
    def __init__(self, request_id: str) -> None:
        self.request_id = request_id


def test_a_cancelled_stream_is_aborted_before_its_step_is_processed():
    """The step in which the hang-up is seen is not counted: the stream's state is gone before vLLM's
    output processor takes the step (as `vllm serve` aborts), and the engine core is told the internal id."""
    watch = cancellation.CancelWatch(3600, lambda key: None)
    try:
        processor = OutputProcessor(["live", "gone", "unary"])
        live, gone, unary = Sender(), Sender(cancelled=True), Sender(cancelled=True)
        watch.register("live", live, streamed=True)
        t_gone = watch.register("gone", gone, streamed=True)
        t_unary = watch.register("unary", unary)  # not streamed: left to the watch's sweep
        in_core, reported = [], []
        assert cancellation.poll_before_outputs(processor, watch, in_core.append, reported.append)
        step = [Output("live-int"), Output("gone-int"), Output("unary-int")]
        assert processor.process_outputs(step, 0.0, None) == "processed"
        assert processor.counted == ["live-int", "unary-int"]
        assert processor.aborted == ["gone"] and in_core == [["gone-int"]] and reported == [["gone"]]
        assert t_gone.done() and not t_unary.done() and unary.polls == 0
        assert live.polls == 1 and gone.polls == 1

        processor.counted.clear()
        processor.process_outputs([Output("live-int")], 0.0, None)  # the next step: no second abort
        assert processor.counted == ["live-int"] and processor.aborted == ["gone"] and gone.polls == 1
    finally:
        watch.close()


def test_the_step_poll_never_polls_a_finished_stream_and_leaves_older_processors_alone():
    watch = cancellation.CancelWatch(3600, lambda key: None)
    try:
        processor = OutputProcessor(["done"])
        done = Sender()
        ticket = watch.register("done", done, streamed=True)
        cancellation.poll_before_outputs(processor, watch, lambda ids: None, lambda keys: None)

        def send():
            done.final = True

        ticket.send_final(send)
        processor.process_outputs([Output("done-int")])
        assert done.polls == 0 and processor.counted == ["done-int"]
    finally:
        watch.close()
    assert not cancellation.poll_before_outputs(object(), watch, lambda ids: None, lambda keys: None)


def test_the_step_poll_asks_a_stream_once_every_few_of_its_steps():
    """Each ask is a round trip to tritonserver: a stream is asked at its first step, then once every
    `step_every` steps, and a hang-up is acted on at the first ask after it (its step is still not counted)."""
    watch = cancellation.CancelWatch(3600, lambda key: None, step_every=4)
    try:
        processor = OutputProcessor(["a", "b"])
        a, b = Sender(), Sender()
        watch.register("a", a, streamed=True)
        cancellation.poll_before_outputs(processor, watch, lambda ids: None, lambda keys: None)
        processor.process_outputs([Output("a-int")])
        watch.register("b", b, streamed=True)  # b starts a step later: asked at its own first step
        for _ in range(4):
            processor.process_outputs([Output("a-int"), Output("b-int")])
        assert (a.polls, b.polls) == (2, 1)  # a: steps 1 and 5; b: its step 1
        b.cancelled = True
        processor.counted.clear()
        processor.process_outputs([Output("a-int"), Output("b-int")])  # b's 5th step: asked again
        assert b.polls == 2 and processor.aborted == ["b"] and processor.counted == ["a-int"]
        for _ in range(3):
            processor.process_outputs([Output("a-int")])
        assert (a.polls, b.polls) == (3, 2)  # a: steps 1, 5 and 9
    finally:
        watch.close()
