"""A server several test modules read from: started by the first test that asks for it, stopped right after
the last one (tests/integration/conftest.py tracks that), so an idle engine never shares the cores with the
modules that run after its users."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Generic, TypeVar

T = TypeVar("T")


class Shared(Generic[T]):
    """`start()` entered on the first get(), exited on release(); a get() after release() starts a new one."""

    def __init__(self, start: Callable[[], AbstractContextManager[T]]) -> None:
        self._start = start
        self._held: tuple[AbstractContextManager[T], T] | None = None
        self.starts = 0

    def get(self) -> T:
        if self._held is None:
            context = self._start()
            self._held = (context, context.__enter__())
            self.starts += 1
        return self._held[1]

    def release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held[0].__exit__(None, None, None)
