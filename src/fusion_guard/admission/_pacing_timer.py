"""The pace timer (``_pacing.py``): spaces a paced tool's admissions between its calls' ends, a
slot opened for each token as it is earned. A loop timer on asyncio (a callback, no task), a
system task on trio that ends when the timer stops and is cancelled with the run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from .._log import log_event

__all__ = ["PaceTimer"]


class PaceTimer:
    """The timer that spaces a paced tool's admissions (see the module): ``start(tick)`` runs
    ``tick()`` now, then again after the seconds each run answers, until one answers None (or
    raises, which is logged) or ``stop()`` is called. At most one runs per timer; ``running``
    says whether it does. ``tool``: the name its failures are logged under."""

    __slots__ = ("_pending", "_tick", "_tool", "running")

    def __init__(self, tool: str) -> None:
        self._tool = tool
        self._tick: Callable[[], float | None] | None = None
        # What to cancel to stop it at once: asyncio's pending callback, or trio's task's scope.
        self._pending: _Cancellable | None = None
        self.running = False

    def start(self, tick: Callable[[], float | None]) -> None:
        """Run ``tick`` now and as it asks (see the class), unless the timer runs already."""
        if self.running:
            return
        self.running = True
        self._tick = tick
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not in asyncio's loop: trio, or no event loop at all
            pass
        else:
            self._pending = loop.call_soon(self._fire, loop)
            return
        try:  # trio: the only other runtime a guard runs on (anyio's backends)
            import trio

            self._pending = scope = trio.CancelScope()
            trio.lowlevel.spawn_system_task(
                self._run_trio, scope, name=f"fusion_guard pace {self._tool}"
            )
        except (ImportError, RuntimeError):  # no event loop: the calls' ends alone pace
            self._stopped()

    def stop(self) -> None:
        """Stop at once: no callback stays scheduled (asyncio), the task is cancelled (trio,
        gone at the scheduler's next turn). A later ``start`` runs it again."""
        pending = self._pending
        self._stopped()
        if pending is not None:
            pending.cancel()

    def _stopped(self) -> None:
        self.running = False
        self._tick = None
        self._pending = None

    def _next(self) -> float | None:
        """Run the tick once: the seconds until the next, or None (the timer stops)."""
        try:
            delay = self._tick() if self._tick is not None else None
        except Exception as failure:  # a bug here must not take the event loop down
            log_event(logging.ERROR, "pace_timer_failed", failure, tool=self._tool)
            delay = None
        if delay is None:
            self._stopped()
        return delay

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        delay = self._next()
        if delay is not None:
            self._pending = loop.call_later(delay, self._fire, loop)

    async def _run_trio(self, scope: _Cancellable) -> None:
        import trio

        try:
            with scope:  # type: ignore[attr-defined]  # trio.CancelScope
                delay = self._next()
                while delay is not None:  # a timer, not a wait for something to happen
                    await trio.sleep(delay)
                    delay = self._next()
        finally:  # stopped, or cancelled with the run; a timer started since is not this one
            if self._pending is scope:
                self._stopped()


class _Cancellable(Protocol):
    """What stops a running timer: asyncio's ``Handle``, trio's ``CancelScope``."""

    def cancel(self) -> None: ...
