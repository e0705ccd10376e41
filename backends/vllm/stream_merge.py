"""Streamed steps that queue up behind a slow send go out as one response.

Each Python-backend send waits for tritonserver to take the response, so under load (16 streams on
a busy CPU) steps pile up in the send queue faster than one thread can send them one by one. The
send loop takes everything queued and merges consecutive steps of the same request with vLLM's own
`RequestOutput.add(..., aggregate=True)` (what its output collector does for a slow consumer): text,
token ids and logprobs concatenate, the cumulative logprob and finish reason are the latest. Nothing
waits to be merged: with an idle queue every step still goes out alone and at once."""

from __future__ import annotations

from typing import Any


class Step:
    """One streamed (or final) generate output of one request, not yet a Triton response."""

    __slots__ = ("output", "prefix", "request_id", "returns", "sender")

    def __init__(self, sender: Any, output: Any, prefix: str, returns: dict, request_id: str = "") -> None:
        self.sender, self.output, self.prefix, self.returns = sender, output, prefix, returns
        self.request_id = request_id

    @property
    def final(self) -> bool:
        return bool(self.output.finished)


def coalesce(items: list) -> list:
    """Queue items in order -> the items to send: runs of `Step`s of one request merged into the first
    (per-request order kept; other items, e.g. errors and bare final flags, pass through and close the
    request's run)."""
    out: list = []
    open_runs: dict[int, Step] = {}
    for item in items:
        if isinstance(item, Step):
            run = open_runs.get(id(item.sender))
            if run is not None and not run.final and _absorb(run, item):
                continue
            open_runs[id(item.sender)] = item
        else:
            open_runs.pop(id(item[0]), None)
        out.append(item)
    return out


def _absorb(run: Step, step: Step) -> bool:
    try:
        run.output.add(step.output, aggregate=True)
    except (AttributeError, TypeError):  # a vLLM without mergeable outputs: send the steps one by one
        return False
    return True
