"""backends/vllm/responses.py: once a request's final response is out, the sending thread holds nothing of it.

Triton frees a decoupled request's response factory (which holds the model) when the stub's ResponseSender object
is destroyed; the idle send loop kept its last batch, and so that batch's senders, until the next response came.
Reproduced here first (a weak reference to the sender stayed alive), released by the fix."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
import types
import weakref
from pathlib import Path

import pytest

BACKEND = Path(__file__).resolve().parents[2] / "backends" / "vllm"
outputs = pytest.importorskip("vllm.outputs")
FINAL = 1


class Sender:
    """What the loop sends through: records the flags, weak-referenceable like pb_utils' ResponseSender."""

    def __init__(self) -> None:
        self.flags: list[int] = []
        self.finished = threading.Event()

    def send(self, response=None, flags: int = 0) -> None:
        self.flags.append(flags)
        if flags & FINAL:
            self.finished.set()

    def is_cancelled(self) -> bool:
        return False


@pytest.fixture(scope="module")
def responses(monkeypatch_module):
    pb = types.ModuleType("triton_python_backend_utils")
    pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL = FINAL
    pb.InferenceResponse = lambda *args, **kwargs: ("response", args, kwargs)
    pb.TritonError = type("TritonError", (Exception,), {"CANCELLED": 2, "UNAVAILABLE": 3})
    monkeypatch_module.setitem(sys.modules, "triton_python_backend_utils", pb)
    monkeypatch_module.syspath_prepend(str(BACKEND))
    spec = importlib.util.spec_from_file_location("vllm_backend_responses", BACKEND / "responses.py")
    module = importlib.util.module_from_spec(spec)
    had_stream_merge = "stream_merge" in sys.modules
    spec.loader.exec_module(module)  # imports the backend's stream_merge from BACKEND
    yield module
    if not had_stream_merge:
        sys.modules.pop("stream_merge", None)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def step(sender, finished: bool):
    completion = outputs.CompletionOutput(index=0, text="a", token_ids=[1], cumulative_logprob=None, logprobs=None,
                                          finish_reason="length" if finished else None)
    output = outputs.RequestOutput(request_id="r", prompt="p", prompt_token_ids=[1], prompt_logprobs=None,
                                   outputs=[completion], finished=finished)
    step_type = sys.modules["stream_merge"].Step
    return step_type(sender, output, "", {}, "r")


def released(ref: weakref.ref, timeout: float = 2.0) -> bool:
    end = time.monotonic() + timeout
    while ref() is not None and time.monotonic() < end:
        time.sleep(0.01)
    return ref() is None


@pytest.mark.parametrize("ending", ["streamed final step", "bare final flag", "cancelled stream"])
def test_the_idle_send_loop_keeps_no_sender_once_its_final_response_is_out(responses, ending):
    queue = responses.ResponseQueue(build_step=lambda s: "built", abort=lambda rid: None, on_cancel=lambda rid: None,
                                    logger=types.SimpleNamespace(log_error=print))
    sender = Sender()
    queue.step(step(sender, finished=False))
    if ending == "streamed final step":
        queue.step(step(sender, finished=True))
    else:
        queue.final(sender, cancelled=ending == "cancelled stream")
    assert sender.finished.wait(5)
    assert sender.flags[-1] & FINAL
    ref = weakref.ref(sender)
    del sender
    # no gc.collect(): a strong reference, not a cycle, is what held the model
    assert released(ref), "the send loop still holds the sender after its final response"
    queue.close()
