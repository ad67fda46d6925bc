"""The queue: a call that found no free slot waits here until it is handed one, re-judged late,
displaced, expired or cancelled.

One interface, ``Queue.join(now, tenant)`` (awaited: the seconds waited, or the refusal raised),
with two ways to wait under it, chosen per call by the runtime it runs on:

- **asyncio**: a bare future per waiter, woken by a hand-off or by one of two timers for the
  whole queue (the oldest waiter's ``queue_timeout``, the tail's judgement). A cancel scope per
  waiter would cost more than the hand-off itself (about 5 us).
- **anyio** (trio): an ``Event`` per waiter under a cancel scope, which trio makes cheap.

The queue is the core's ``OrderedDict`` of waiters: arrival, hand-off (from either end) and
cancellation (delete by key) are all O(1), however many wait. Waiters are queued in arrival
order whatever order serves them (LIFO pops the newest), so the head is always the oldest.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import anyio.lowlevel

from .._exceptions import ServerBusy
from .._observer import Outcome, observer_failed, outcome_of
from ._core import Core, Waiter
from ._fairness import Tenant
from ._refusal import Refusals

__all__ = ["Queue", "asyncio_cancel_pending", "key_of"]


def key_of(tenant: Tenant[Waiter] | None) -> str | None:
    """The client key of a call's client record (None: no record, or the keyless client)."""
    return None if tenant is None else tenant.key


class Queue:
    """The waiters of one guard (see the module): joining, judging, leaving."""

    __slots__ = ("_cancel_pending", "_core", "_expiry", "_judge", "_loop", "_refusals")

    def __init__(self, core: Core, refusals: Refusals) -> None:
        self._core = core
        self._refusals = refusals
        # On asyncio, one timer for the oldest waiter's queue_timeout and one for judging the
        # tail, on the loop the queue was last joined on.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cancel_pending: Callable[[asyncio.AbstractEventLoop], bool] = _always
        self._expiry: asyncio.TimerHandle | None = None
        self._judge: asyncio.TimerHandle | None = None

    def join(self, now: float, tenant: Tenant[Waiter] | None) -> Coroutine[None, None, float]:
        """Wait in the queue from ``now``; ``tenant``: the caller's client's record, if kept."""
        loop = asyncio._get_running_loop()
        if loop is None:
            return self._join_anyio(now, tenant)  # trio: an anyio Event under a cancel scope
        return self._join_loop(now, loop, tenant)

    # -- the bookkeeping both ways share ------------------------------------------------------

    def drop(self, waiter: Waiter) -> None:
        """Take ``waiter`` out of the queue unserved."""
        core = self._core
        del core.waiters[waiter]
        tenant = waiter.tenant
        if tenant is not None:
            levels = core.levels
            if levels is None:
                core.fair.remove(tenant, waiter)  # type: ignore[union-attr]  # kept with tenants
            else:
                levels.remove(waiter)

    def last_served(self) -> Waiter:
        """The waiter to be served last (the queue is not empty): the tail, or with fair
        shares the heaviest client's newest call, or under priorities the lowest priority's
        last (``Levels.last_served``)."""
        levels = self._core.levels
        if levels is not None:
            return levels.last_served()
        fair = self._core.fair
        if fair is not None and fair.serves_in_turn:
            last = fair.last_served()
            assert last is not None  # every waiter belongs to a client once records are kept
            return last
        return next(reversed(self._core.waiters))

    def rejudge(self, now: float) -> int:
        """Shed the waiters that can no longer expect a slot in time, from the tail, and return
        how many remain queued.

        The test (``QueueDiscipline.is_late``) is the arrival test, against each waiter's own
        deadline. The tail is the last to be served, so the look stops at the first waiter in
        time: O(1), plus O(1) per waiter shed (each is shed once). The shed waiter's own task
        raises the refusal, so that a caller cancelled meanwhile counts as cancelled, once.
        """
        core = self._core
        queued = len(core.waiters)
        service = core.service
        discipline = core.discipline
        overloaded = discipline.sustained(now, queued, service.mean)
        outrun = discipline.overload.overloaded()
        hold = service.evidence(now - core.latest_start, overloaded, outrun)
        spread = service.spread()
        is_late, slots, latest = discipline.is_late, core.max_active, core.latest_start
        while queued:
            tail = self.last_served()
            if not is_late(tail.since, queued, now, slots, hold, latest, spread, overloaded):
                break
            self.drop(tail)
            tail.left = "predicted"
            tail.wake()
            queued -= 1
        return queued

    def _judge_delay(self, tail_since: float) -> float:
        """Seconds until the tail (queued at ``tail_since``) would be judged late."""
        core = self._core
        return core.discipline.judge_delay(
            tail_since,
            len(core.waiters),
            core.clock(),
            core.max_active,
            core.service,
            core.latest_start,
        )

    def _enqueue(self, waiter: Waiter, now: float) -> None:
        core = self._core
        core.waiters[waiter] = None
        if waiter.tenant is not None:
            levels = core.levels
            if levels is None:
                core.fair.push(waiter.tenant, waiter, core.active, now)  # type: ignore[union-attr]
            else:
                levels.push(waiter, core.active, now)

    def _abandon(self, waiter: Waiter, exc: BaseException) -> None:
        """The waiter was cancelled: leave the queue, or pass on a slot handed to it meanwhile;
        report the call's end (no duration: it never held a slot)."""
        core = self._core
        core.cancelled_queued += 1
        if waiter.granted:
            tenant = waiter.tenant
            if tenant is not None:
                core.fair.ended(tenant.key)  # type: ignore[union-attr]  # kept
                if core.levels is not None:
                    core.levels.ended(tenant.rank)
            core.release()
        elif not waiter.left:  # a re-judged or expired waiter has left the queue already
            self.drop(waiter)
        outcome: Outcome = outcome_of(exc)
        ends = core.ends
        if ends is not None:
            try:
                ends.finished(outcome, None)
            except Exception as failure:  # observers never change an outcome
                observer_failed(ends, "finished", failure)

    def _unserved(self, waiter: Waiter) -> ServerBusy:
        """The refusal of a waiter that left the queue without a slot."""
        core = self._core
        refusals = self._refusals
        queued = len(core.waiters)
        tenant = waiter.tenant
        caller = key_of(tenant)
        rank = None if tenant is None else tenant.rank
        if waiter.left == "predicted":  # re-judged: it would not be served in time
            return refusals.refuse(
                "queue_timeout", queued, refusals.predicted_busy, None, caller, rank
            )
        if waiter.left == "outranked":  # a call of a higher priority took its place
            return refusals.refuse("queue_full", queued, refusals.busy, None, caller, rank)
        if waiter.left == "displaced":  # a lighter client's call took its place
            tenant = waiter.tenant
            assert tenant is not None  # displaced: a client's call
            assert core.fair is not None
            own = (core.fair.active(tenant.key, core.active), len(tenant.waiters))
            return refusals.refuse("fair_share", queued, refusals.busy, own, caller, rank)
        return refusals.refuse("queue_timeout", queued, refusals.busy, None, caller, rank)

    # -- asyncio: a future per waiter, two timers per queue ---------------------------------

    async def _join_loop(
        self, now: float, loop: asyncio.AbstractEventLoop, tenant: Tenant[Waiter] | None
    ) -> float:
        core = self._core
        if self._loop is not loop:  # the first queue on this event loop
            self._loop, self._expiry, self._judge = loop, None, None
            self._cancel_pending = asyncio_cancel_pending(loop)
        waiter = Waiter(now, loop.create_future(), loop.time() + core.queue_timeout, tenant)
        self._enqueue(waiter, now)
        if self._expiry is None and waiter.due < math.inf:
            self._expiry = loop.call_at(waiter.due, self._expire)
        if core.discipline.rejudging:
            self._judge_tail(loop)
        try:
            await waiter.future  # type: ignore[misc]  # set above
            if waiter.granted and self._cancel_pending(loop):
                # Cancelled by an anyio scope at the very moment the slot was handed over
                # (anyio does not cancel a task whose future is done): give the slot on rather
                # than run the body.
                await anyio.lowlevel.checkpoint_if_cancelled()
        except BaseException as exc:
            self._abandon(waiter, exc)
            raise
        if waiter.granted:
            return core.clock() - now
        raise self._unserved(waiter)

    def _expire(self) -> None:
        """The oldest waiter's queue_timeout is due (asyncio timer): refuse every waiter past
        its own, oldest first (they arrived, so they expire, in queue order), then wait for the
        next."""
        self._expiry = None
        loop = self._loop
        assert loop is not None  # armed on it
        now = loop.time()
        waiters = self._core.waiters
        while waiters:
            head = next(iter(waiters))
            if head.due > now:
                self._expiry = loop.call_at(head.due, self._expire)
                return
            self.drop(head)
            head.left = "expired"
            head.wake()

    def _judge_tail(self, loop: asyncio.AbstractEventLoop) -> None:
        """Arm the judgement of the tail (the waiter expected to wait longest) for when it would
        be predicted late, unless one is armed sooner (an early look only re-arms)."""
        if not self._core.waiters:
            return
        at = loop.time() + self._judge_delay(self.last_served().since)
        judge = self._judge
        if judge is not None:
            if judge.when() <= at:
                return
            judge.cancel()
        self._judge = loop.call_at(at, self._judge_fired)

    def _judge_fired(self) -> None:
        self._judge = None
        loop = self._loop
        assert loop is not None  # armed on it
        self.rejudge(self._core.clock())
        self._judge_tail(loop)

    # -- anyio (trio): an Event per waiter under a cancel scope -----------------------------

    async def _join_anyio(self, now: float, tenant: Tenant[Waiter] | None) -> float:
        core = self._core
        waiter = Waiter(now, None, math.inf, tenant)
        self._enqueue(waiter, now)
        try:
            if core.discipline.rejudging:
                await self._wait_judged(waiter)
            else:
                with anyio.move_on_after(core.queue_timeout):
                    await waiter.event.wait()  # type: ignore[union-attr]  # anyio's
            # Cancelled at the very moment the slot was handed over (trio resumes a woken task
            # without delivering the cancellation): give the slot on rather than run the body.
            await anyio.lowlevel.checkpoint_if_cancelled()
        except BaseException as exc:
            self._abandon(waiter, exc)
            raise
        if waiter.granted:
            return core.clock() - now
        if not waiter.left:
            self.drop(waiter)  # the deadline passed first
            waiter.left = "expired"
        raise self._unserved(waiter)

    async def _wait_judged(self, waiter: Waiter) -> None:
        """Wait for the slot until ``queue_timeout``; meanwhile wake whenever this waiter, as
        the tail of the queue, would be predicted to miss it, and judge the queue then."""
        event = waiter.event
        assert event is not None  # the anyio path's waiter
        deadline = anyio.current_time() + self._core.queue_timeout
        while not event.is_set():  # set by a hand-off, or by a re-judgement shedding it
            # Only the tail wakes to judge (the tail is judged first, and every arrival behind
            # it looks).
            tail = self.last_served() is waiter
            wake = anyio.current_time() + (self._judge_delay(waiter.since) if tail else math.inf)
            with anyio.CancelScope(deadline=min(wake, deadline)):
                await event.wait()
            if event.is_set() or anyio.current_time() >= deadline:
                return
            self.rejudge(self._core.clock())


def _always(loop: asyncio.AbstractEventLoop) -> bool:
    return True


def asyncio_cancel_pending(
    loop: asyncio.AbstractEventLoop,
) -> Callable[[asyncio.AbstractEventLoop], bool]:
    """Whether the current task has an anyio cancellation pending: what anyio's
    ``checkpoint_if_cancelled`` looks at on asyncio, read without awaiting, so that a queued
    call handed its slot pays for the checkpoint only when there is something to deliver (the
    awaited checkpoint cost an eighth of a hand-off). Found on first use: anyio loads its
    asyncio backend when a loop first runs, not at ``import fusion_guard``. Should anyio's
    internals move, every hand-off takes the public checkpoint again (tests pin both)."""
    try:
        from anyio._backends._asyncio import _task_states
    except ImportError:  # pragma: no cover (anyio moved it: the public checkpoint still works)
        return _always
    state_of = _task_states.get
    # The task running on a loop: what asyncio.current_task(loop) reads, without the Python
    # call around it, where asyncio keeps that dict and it is the live one (checked from the
    # task that asks first): the Python call cost a fifteenth of a hand-off on 3.11.
    current_tasks = getattr(asyncio.tasks, "_current_tasks", None)
    task_on: Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None]
    task_on = asyncio.current_task
    if isinstance(current_tasks, dict) and current_tasks.get(loop) is asyncio.current_task(loop):
        task_on = current_tasks.get

    def cancel_pending(loop: asyncio.AbstractEventLoop) -> bool:
        state = state_of(task_on(loop))  # type: ignore[arg-type]  # inside a task
        scope = None if state is None else state.cancel_scope
        try:
            while scope is not None:
                if scope.cancel_called:
                    return True
                if scope.shield:
                    return False
                scope = scope._parent_scope
        except AttributeError:  # pragma: no cover (anyio's scopes changed shape)
            return True
        return False

    return cancel_pending
