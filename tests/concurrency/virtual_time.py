"""Virtual time for whole scenarios, on asyncio and on trio: time passes only while every task
waits, and jumps to the next timer, so seconds of calls run in milliseconds and the same
scenario gives the same figures on any machine.

Inside :func:`run_virtual`, ``anyio.sleep`` and ``anyio.current_time`` (what a guard is given as
its clock) read the virtual clock; the guard's own timers (queue timeouts, re-judging the tail)
run on it too, as they run on the event loop's clock.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
from trio.testing import MockClock

T = TypeVar("T")


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without waiting; where the loop would sleep until its next timer, the virtual
    clock jumps there instead."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[Any, int]]:
        ready: list[tuple[Any, int]] = super().select(0)
        if not ready and timeout is not None and timeout > 0:
            self.now += timeout
        elif not ready and timeout is None:
            raise RuntimeError("virtual time: every task waits and no timer is due (a deadlock)")
        return ready


class _VirtualLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose clock is the selector's virtual one."""

    def __init__(self) -> None:
        self._jumping = _JumpingSelector()
        super().__init__(self._jumping)

    def time(self) -> float:
        return self._jumping.now


def run_virtual(fn: Callable[[], Awaitable[T]], backend: str) -> T:
    """``fn()`` run on ``backend`` ("asyncio" or "trio") in virtual time."""
    if backend == "trio":
        options: dict[str, Any] = {"clock": MockClock(autojump_threshold=0)}
    else:
        options = {"loop_factory": _VirtualLoop}
    return anyio.run(fn, backend=backend, backend_options=options)
