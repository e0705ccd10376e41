"""A result that may still be on its way back from the GPU. The copy to pinned host memory is queued
behind the forward pass and an event recorded after it, so the engine can prepare and launch the next
batch while this one finishes, and block only when the values are read."""

from __future__ import annotations

import torch


class ResultHandle:
    def __init__(self, values: torch.Tensor) -> None:
        if values.is_cuda:
            self._host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
            self._host.copy_(values, non_blocking=True)
            self._event: torch.cuda.Event | None = torch.cuda.Event()
            self._event.record()
        else:
            self._host = values
            self._event = None

    def done(self) -> bool:
        return self._event is None or self._event.query()

    def result(self) -> torch.Tensor:
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        return self._host
