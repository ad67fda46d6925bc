"""An asyncio event loop in virtual time: time passes only while every task waits, jumping to
the next timer at once, so the minutes a simulated tool runs take seconds and every run of a
seed repeats exactly. ``fusion-guard demo --scenario priorities`` runs in it (its figures are
the algorithm's, without the machine's lag); the tests' ``virtual_time.py`` uses it too."""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import sniffio

__all__ = ["VirtualTimeLoop", "run_in_virtual_time"]

T = TypeVar("T")


class _JumpingSelector(selectors.DefaultSelector):
    """Never sleeps for a timer: moves its loop's virtual time to it instead."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is None:
            return super().select(None)  # no timer to jump to: only I/O can wake the loop
        ready = super().select(0)
        if not ready and timeout > 0:
            self._loop.virtual_now += timeout
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop in virtual time (see the module)."""

    def __init__(self) -> None:
        self.virtual_now = 0.0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.virtual_now


def run_in_virtual_time(fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``fn()`` on a ``VirtualTimeLoop``. Named for sniffio as ``anyio.run`` does, so that
    ``anyio.current_time`` also answers in the loop's timer callbacks (where a guard re-judges
    its queue), which run in no task."""
    token = sniffio.current_async_library_cvar.set("asyncio")
    try:
        with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
            return runner.run(fn())
    finally:
        sniffio.current_async_library_cvar.reset(token)
