"""The refreshing of one connection's fleet-semaphore leases (see :class:`LeaseRefresher`)."""

from __future__ import annotations

import asyncio
import math
from typing import Protocol

from .._bounds import LEASE_REFRESH_PERIOD

__all__ = ["LeaseRefresher", "Leases"]

# The longest refresh period, RECOVERY_GRACE / 2: a silent replica (its calls running, none
# arriving) learns of a restart within the grace. The settings floor leases on it.
_REFRESH_MAX = LEASE_REFRESH_PERIOD
_FIRST_RETRY = 0.05  # the refresher's retries of leases left to settle, doubling up to
_MAX_RETRY = 0.2  # this (seconds): inside RECOVERY_GRACE


class Leases(Protocol):
    """What the refresher needs of a fleet semaphore (``_redis_lease.FleetSemaphore``)."""

    @property
    def lease(self) -> float: ...

    @property
    def owing(self) -> bool: ...

    async def refresh(self) -> bool: ...

    async def settle(self) -> bool: ...


class LeaseRefresher:
    """The refreshing of one connection's leases, so one process's: every fleet semaphore
    holding some has them refreshed every third of the shortest lease (two refreshes may fail
    before a running call loses its lease) but at least every quarter second (so a restarted
    Redis gets the running calls' leases back within :data:`RECOVERY_GRACE`: one round trip
    per semaphore holding leases), and what failures left is settled (see
    :meth:`FleetSemaphore.settle`): at once, again whenever Redis answers a call, and every
    50 ms doubling to 200 ms while Redis keeps failing.

    A round is a timer (cheap to set and cancel with every call) that starts a task only when
    due; nothing is scheduled while nothing is held or owed, so an idle process runs nothing.
    """

    __slots__ = ("_failing", "_holding", "_owing", "_refreshed", "_retry", "_round", "_timer")

    def __init__(self) -> None:
        self._holding: set[Leases] = set()
        self._owing: set[Leases] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._round: asyncio.Task[None] | None = None
        self._refreshed = 0.0  # loop time of the last refresh, or of the first lease
        self._retry = _FIRST_RETRY
        self._failing = False  # the last settling failed: retry on the backoff or an answer

    @property
    def active(self) -> bool:
        """Whether a round is scheduled or running."""
        return self._timer is not None or self._round is not None

    def holding(self, semaphore: Leases) -> None:
        """``semaphore`` holds leases: refresh them until it does not."""
        self._holding.add(semaphore)
        if not self.active:
            self._refreshed = asyncio.get_running_loop().time()
            self._schedule(self._period())

    def owe(self, semaphore: Leases) -> None:
        """``semaphore`` has leases to settle: now, unless Redis is failing (then at the next
        retry, so an outage's failed calls do not each add a round trip)."""
        self._owing.add(semaphore)
        if not self._failing:
            self.wake()
        elif not self.active:
            self._schedule(self._retry)

    def wake(self) -> None:
        """Redis answered: settle now what is owed."""
        if self._owing and self._round is None:
            self._schedule(0.0)

    def idle(self, semaphore: Leases) -> None:
        """``semaphore`` holds no lease any more."""
        self._holding.discard(semaphore)
        if not self._holding and not self._owing and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def stop(self) -> None:
        """Cancel what is scheduled or running (started again by the next lease or failure)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._round is not None:
            self._round.cancel()
            self._round = None

    def _schedule(self, delay: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(max(0.0, delay), self._start_round)

    def _start_round(self) -> None:
        self._timer = None
        self._round = asyncio.get_running_loop().create_task(
            self._run_round(), name="fusion_guard lease refresher"
        )

    async def _run_round(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            if self._holding and loop.time() >= self._refreshed + self._period():
                for semaphore in tuple(self._holding):
                    await semaphore.refresh()
                self._refreshed = loop.time()
            self._failing = not await self._settle()
            self._retry = min(2 * self._retry, _MAX_RETRY) if self._failing else _FIRST_RETRY
        finally:
            self._round = None
        if self._owing:
            self._schedule(self._retry if self._failing else 0.0)
        elif self._holding:  # the period is read again: semaphores start and stop holding
            self._schedule(self._refreshed + self._period() - loop.time())

    async def _settle(self) -> bool:
        settled = True
        for semaphore in tuple(self._owing):
            # Calls may have left it more to do while it settled: it stays owed then.
            if await semaphore.settle() and not semaphore.owing:
                self._owing.discard(semaphore)
            else:
                settled = False
        return settled

    def _period(self) -> float:
        leases = [semaphore.lease for semaphore in self._holding]
        return min(min(leases) / 3, _REFRESH_MAX) if leases else math.inf
