"""The handler deadline: one implementation for a slot's body and for a tool without slots.

Every admitted call runs under a deadline (50 s by default) that almost never fires, so entering
and leaving it is on the hot path. anyio's ``CancelScope`` costs about 5 us on asyncio (it tracks
the host task and retries delivery); a timer handle on the event loop that cancels the task, undone
with ``Task.uncancel`` as the standard library's ``asyncio.timeout`` does, costs about 1 us. So on
asyncio the deadline is that timer; elsewhere (trio) it is an anyio ``CancelScope``, which trio
makes cheap.

The asyncio form is edge-triggered like ``asyncio.timeout``: the body receives one
``CancelledError`` at the deadline. A body that swallows it and carries on keeps its slot until
it ends, and is then reported by what it returned (anyio's scope would cancel it again at every
later checkpoint).
"""

from __future__ import annotations

import asyncio

import anyio

__all__ = ["Deadline"]


class Deadline:
    """Cancel the current task's body ``timeout`` seconds from now; entered on construction.

    ``expired(exc_type)`` leaves the deadline (call it exactly once, from the same task, as the
    body ends) and tells whether the deadline cancelled the body: then the ``CancelledError``
    the body ended with is the deadline's, and the caller raises its TIMEOUT instead. Otherwise
    the body's own ending (its result, its exception, an outer cancellation) stands.
    """

    __slots__ = ("_cancelling", "_fired", "_handle", "_scope", "_task")

    def __init__(self, timeout: float) -> None:
        loop = asyncio._get_running_loop()
        task = None if loop is None else asyncio.current_task(loop)
        if task is None:  # not asyncio (trio), or no task to cancel
            scope = anyio.CancelScope(deadline=anyio.current_time() + timeout)
            scope.__enter__()
            self._scope: anyio.CancelScope | None = scope
            return
        assert loop is not None  # for the type checker: a task runs on a loop
        self._scope = None
        self._task = task
        self._cancelling = task.cancelling()
        self._fired = False
        self._handle = loop.call_at(loop.time() + timeout, self._fire)

    def _fire(self) -> None:
        self._fired = True
        self._task.cancel()

    def expired(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None = None,
        tb: object = None,
    ) -> bool:
        scope = self._scope
        if scope is not None:
            # The scope swallows only its own cancellation; anything else propagates from here.
            scope.__exit__(exc_type, exc, tb)  # type: ignore[arg-type]
            return scope.cancelled_caught
        self._handle.cancel()
        if not self._fired:
            return False
        # Ours when no other cancellation was requested since the deadline was entered.
        outstanding = self._task.uncancel()
        return (
            outstanding <= self._cancelling
            and exc_type is not None
            and issubclass(exc_type, asyncio.CancelledError)
        )
