"""backends/vllm/stream_merge.py: streamed steps that queued up behind a send are merged per request
with vLLM's own RequestOutput.add, in order; anything else passes through and ends the request's run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "backends" / "vllm" / "stream_merge.py"
_spec = importlib.util.spec_from_file_location("vllm_backend_stream_merge", SRC)
stream_merge = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stream_merge)
Step, coalesce = stream_merge.Step, stream_merge.coalesce

outputs = pytest.importorskip("vllm.outputs")


def step(sender, text, ids, finish=None, cumulative=None, prefix=""):
    completion = outputs.CompletionOutput(index=0, text=text, token_ids=list(ids), cumulative_logprob=cumulative,
                                          logprobs=None, finish_reason=finish)
    output = outputs.RequestOutput(request_id=f"r{id(sender)}", prompt="p", prompt_token_ids=[1, 2],
                                   prompt_logprobs=None, outputs=[completion], finished=finish is not None)
    return Step(sender, output, prefix, {})


def test_steps_of_one_request_merge_in_order_and_keep_the_first_prefix():
    a = object()
    merged = coalesce([step(a, "Hel", [1], prefix="prompt "), step(a, "lo", [2], cumulative=-1.0),
                       step(a, "!", [3], finish="length", cumulative=-2.5)])
    assert len(merged) == 1
    out = merged[0]
    c = out.output.outputs[0]
    assert (out.prefix, c.text, list(c.token_ids), c.cumulative_logprob, c.finish_reason) == (
        "prompt ", "Hello!", [1, 2, 3], -2.5, "length")
    assert out.final and out.output.prompt_token_ids == [1, 2]


def test_requests_interleaved_in_the_queue_each_merge_into_their_first_slot():
    a, b = object(), object()
    merged = coalesce([step(a, "a1", [1]), step(b, "b1", [7]), step(a, "a2", [2]), step(b, "b2", [8], finish="stop")])
    assert [(m.sender, m.output.outputs[0].text, m.final) for m in merged] == [(a, "a1a2", False),
                                                                                (b, "b1b2", True)]


def test_other_items_pass_through_and_close_the_run():
    a = object()
    error = (a, "an error response", 1)
    merged = coalesce([step(a, "x", [1]), error, step(a, "y", [2])])
    assert [m if isinstance(m, tuple) else m.output.outputs[0].text for m in merged] == ["x", error, "y"]


def test_nothing_is_merged_after_a_final_step():
    a = object()
    merged = coalesce([step(a, "x", [1], finish="stop"), step(a, "y", [2])])
    assert [m.output.outputs[0].text for m in merged] == ["x", "y"]


def test_outputs_that_cannot_merge_are_sent_one_by_one():
    class Plain:
        finished = False

    a = object()
    items = [Step(a, Plain(), "", {}), Step(a, Plain(), "", {})]
    assert coalesce(items) == items
