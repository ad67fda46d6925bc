"""The handler deadline: one implementation for a slot's body and for a tool without slots, and
one owner of what its expiry raises (``Timeouts``: the TIMEOUT envelopes, kept rendered).

Every admitted call runs under a deadline (50 s by default) that almost never fires, so entering
and leaving it is on the hot path. anyio's ``CancelScope`` costs about 5 us on asyncio, and even
a timer handle per call (what ``asyncio.timeout`` does) costs 2-4 us inside a busy server (a
handle, a context copy, a heap push and a cancellation each time). So on asyncio the deadlines of
one length share one timer: they expire in the order they were set, so a queue in start order
with one timer armed for its oldest live entry finds every expiry, and setting or clearing a
deadline is an append or a flag. When the timer fires it cancels the task of each entry past its
deadline (undone with ``Task.uncancel`` once the task has seen it, as ``asyncio.timeout`` does)
and re-arms for the next live entry. Elsewhere (trio) the deadline is an anyio ``CancelScope``,
which trio makes cheap.

The asyncio form is edge-triggered like ``asyncio.timeout``: the body receives one
``CancelledError`` at the deadline. A body that swallows it and carries on keeps its slot until
it ends, and is then reported by what it returned (anyio's scope would cancel it again at every
later checkpoint).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio

from .._exceptions import HandlerTimeout
from ..wire._shedding import TimeoutTemplate

__all__ = ["TIMEOUT_TEMPLATES", "Deadline", "Timeouts"]

_get_running_loop = asyncio._get_running_loop
#: The running task of a loop: before 3.12 ``asyncio.current_task`` is a Python function over
#: asyncio's own table, read here directly (a C dict look-up per deadline); since, it is C.
_current_task: Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None] = (
    asyncio.tasks._current_tasks.get  # type: ignore[attr-defined]  # asyncio's own, C
    if sys.version_info < (3, 12)
    else asyncio.current_task
)

#: TIMEOUT envelopes kept rendered per tool, one per distinct deadline: a tool sees one or a
#: few (the Guard passes its tool's), but per-call timeouts may vary without bound.
TIMEOUT_TEMPLATES = 8

#: Queues kept per thread, one per distinct deadline length: a guard uses one or a few, but
#: per-call timeouts may vary without bound (a forgotten queue still serves its own entries).
MAX_QUEUES = 64
#: A queue whose finished entries outnumber its live ones by this much (stuck behind a long
#: call at its head) is compacted, so memory follows the calls in flight.
COMPACT_SLACK = 64


class _Queue:
    """The deadlines of one length on one event loop, in start order, under one timer.

    ``now``: the loop's clock, read without the loop's method when that method only reads
    ``time.monotonic`` (asyncio's own loops): one Python call fewer per deadline. A deadline
    adds itself to ``entries`` (``live`` counts those still running, ``timer`` is armed for the
    oldest) and takes itself off when its body ends: written out in ``Deadline``, whose entry
    and exit every admitted call makes, where a method call each was a fifth of its cost."""

    __slots__ = ("entries", "live", "loop", "now", "timeout", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self.loop = loop
        self.timeout = timeout
        self.now: Callable[[], float] = (
            time.monotonic if getattr(type(loop), "time", None) is _BASE_TIME else loop.time
        )
        self.entries: deque[Deadline] = deque()
        self.live = 0  # deadlines in the deque whose body still runs
        self.timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        """Deadlines held, finished ones not yet dropped included (memory follows this)."""
        return len(self.entries)

    def expire(self) -> None:
        """The timer fired: cancel the bodies past their deadline, re-arm for the next."""
        self.timer = None
        now = self.loop.time()
        entries = self.entries
        while entries:
            head = entries[0]
            if head.task is not None and head.at > now:
                self.timer = self.loop.call_at(head.at, self.expire)
                return
            entries.popleft()
            if head.task is not None:
                self.live -= 1
                head.fire()


_BASE_TIME = asyncio.BaseEventLoop.time

_per_thread = threading.local()


def _queue(loop: asyncio.AbstractEventLoop, timeout: float) -> _Queue:
    try:
        queues: dict[float, _Queue] = _per_thread.queues
    except AttributeError:
        queues = _per_thread.queues = {}
    queue = queues.get(timeout)
    if queue is None or queue.loop is not loop:
        if len(queues) >= MAX_QUEUES:
            queues.clear()
        queue = queues[timeout] = _Queue(loop, timeout)
    return queue


class Deadline:
    """Cancel the current task's body ``timeout`` seconds from now; entered on construction.

    ``expired(exc_type)`` leaves the deadline (call it exactly once, from the same task, as the
    body ends) and tells whether the deadline cancelled the body: then the ``CancelledError``
    the body ended with is the deadline's, and the caller raises its TIMEOUT instead. Otherwise
    the body's own ending (its result, its exception, an outer cancellation) stands.
    """

    __slots__ = ("_cancelling", "_fired", "_queue", "_scope", "at", "task")

    def __init__(self, timeout: float) -> None:
        loop = _get_running_loop()
        task = None if loop is None else _current_task(loop)
        self.task = task  # None once the body has ended (on asyncio)
        if task is None:  # not asyncio (trio), or no task to cancel
            scope = anyio.CancelScope(deadline=anyio.current_time() + timeout)
            scope.__enter__()
            self._scope: anyio.CancelScope | None = scope
            return
        assert loop is not None  # for the type checker: a task runs on a loop
        self._scope = None
        self._cancelling = task.cancelling()
        self._fired = False
        # ``_queue(loop, timeout)`` written out: once per admitted call, the call a tenth of it.
        try:
            queue = _per_thread.queues.get(timeout)
        except AttributeError:
            queue = None
        if queue is None or queue.loop is not loop:
            queue = _queue(loop, timeout)
        self._queue = queue
        self.at = at = queue.now() + timeout
        queue.entries.append(self)
        queue.live += 1
        if queue.timer is None:
            queue.timer = loop.call_at(at, queue.expire)

    def fire(self) -> None:
        """The deadline has passed (called by its queue's timer): cancel the body."""
        self._fired = True
        if self.task is not None:
            self.task.cancel()

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
        task = self.task
        self.task = None
        if not self._fired:  # ended before it fired: off its queue
            queue = self._queue
            queue.live -= 1
            entries = queue.entries
            while entries and entries[0].task is None:
                entries.popleft()
            if len(entries) > 2 * queue.live + COMPACT_SLACK:
                queue.entries = deque(each for each in entries if each.task is not None)
            return False
        assert task is not None  # set until this first and only call
        # Ours when no other cancellation was requested since the deadline was set.
        outstanding = task.uncancel()
        return (
            outstanding <= self._cancelling
            and exc_type is not None
            and issubclass(exc_type, asyncio.CancelledError)
        )


class Timeouts:
    """What a body ended by its deadline raises, for one tool: a ``HandlerTimeout`` carrying
    the TIMEOUT envelope of that deadline, rendered once and kept (``TIMEOUT_TEMPLATES`` at
    most, the oldest making room). The one place a deadline's expiry becomes an answer, for a
    slot's body (through the guard's refusals, which count it) and for a tool without slots."""

    __slots__ = ("_templates", "_tool")

    def __init__(self, tool: str) -> None:
        self._tool = tool
        self._templates: dict[float, TimeoutTemplate] = {}

    def refusal(self, timeout: float) -> HandlerTimeout:
        templates = self._templates
        template = templates.get(timeout)
        if template is None:
            if len(templates) >= TIMEOUT_TEMPLATES:
                del templates[next(iter(templates))]  # the oldest deadline makes room
            template = templates[timeout] = TimeoutTemplate(self._tool, timeout)
        return HandlerTimeout(template.render())
