"""A tool that stands for a scarce resource: a hidden pool of workers with log-normal service
times, which degrades when too many calls pile up inside it (as a database does when its clients
exhaust the pool and thrash)."""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import anyio.lowlevel

__all__ = ["PunctualSleep", "SimulatedTool", "ToolModel", "WorkerTime"]

_Z99 = 2.3263478740408408  # the standard normal's 99th percentile
_LATENESS_WEIGHT = 0.05  # of each sleep in the running mean of how late the event loop wakes


class PunctualSleep:
    """Sleeps that end on time on average, for a simulated worker's service.

    The event loop wakes a sleeping task late: by part of a timer tick, and by whatever it was
    busy with. A worker that slept its drawn service time held its slot that much longer
    (about 0.8 ms on a 20 ms mean: ``python benchmarks/timer_lateness.py``), so the tool served
    about 4 % below its model and every load the demos offer was that much nearer its real
    capacity than it says (the 0.8x level ran at about 0.83x). A real worker pool does not
    stall on its callers' event loop, so each sleep asks to wake the running mean lateness
    early. In virtual time nothing is late and the sleeps are the plain ones."""

    __slots__ = ("_lateness", "_sleep_until")

    def __init__(self, sleep_until: Callable[[float], Awaitable[None]] = anyio.sleep_until) -> None:
        self._sleep_until = sleep_until
        self._lateness = 0.0

    async def __call__(self, seconds: float) -> None:
        now = anyio.current_time()
        wake = now + seconds - self._lateness
        if wake <= now:
            await anyio.lowlevel.checkpoint()
            return
        await self._sleep_until(wake)
        self._lateness += (anyio.current_time() - wake - self._lateness) * _LATENESS_WEIGHT


class WorkerTime:
    """The time a simulated tool's workers spend, for both demo tools: each service held for its
    draw, slowed by the calls piled up inside the tool, and ending on time (``PunctualSleep``);
    and what each worker really spent, for the capacity goodput is divided by."""

    __slots__ = ("_sleep", "draws")

    def __init__(self) -> None:
        self._sleep = PunctualSleep()
        self.draws: list[tuple[float, float]] = []
        """(start, service time without contention slowdown) of every service finished."""

    async def serve(self, service: float, piled_up: int, contention_scale: float) -> None:
        """Hold a worker for ``service``, slowed by ``1 / contention_scale`` for each of the
        ``piled_up`` calls inside the tool beyond its workers."""
        slowdown = 1.0 + piled_up / contention_scale
        begun = anyio.current_time()
        await self._sleep(service * slowdown)
        # What a worker really spent, less the contention slowdown (the policy's fault, not
        # the tool's): the draw, give or take how late the event loop woke it.
        spent = anyio.current_time() - begun - service * (slowdown - 1.0)
        self.draws.append((begun, spent))

    def realised_capacity(self, start: float, end: float, workers: int, nominal: float) -> float:
        """Calls per second ``workers`` could serve with the service times they really had for
        services begun in ``[start, end)`` (``nominal`` when there were none).

        With sigma = 1 the mean of a few hundred draws strays by several per cent from the
        model's mean, and every sleep ends a little off its time; dividing goodput by this
        capacity keeps that luck and that harness cost out of the policies' figures."""
        drawn = [spent for begun, spent in self.draws if start <= begun < end]
        if not drawn:
            return nominal
        return workers * len(drawn) / sum(drawn)


@dataclass(frozen=True, kw_only=True)
class ToolModel:
    """The resource behind the tool. Defaults: 2 workers, 20 ms mean, sigma 1 (capacity about
    100 calls/s, uncontended p99 about 124 ms)."""

    workers: int = 2
    mean_service_s: float = 0.020
    sigma: float = 1.0
    contention_scale: float = 100.0
    """Each call piled up beyond the worker count slows every service by 1/contention_scale."""

    @property
    def capacity_rps(self) -> float:
        return self.workers / self.mean_service_s

    @property
    def mu(self) -> float:
        return math.log(self.mean_service_s) - self.sigma**2 / 2

    @property
    def uncontended_p99_s(self) -> float:
        return math.exp(self.mu + _Z99 * self.sigma)


class SimulatedTool:
    """``await tool()`` holds one hidden worker for a log-normal time. Not instrumented: only
    the policies in front of it decide how many calls reach it."""

    def realised_capacity(self, start: float, end: float) -> float:
        """See ``WorkerTime.realised_capacity``; the nominal capacity when no service began."""
        return self._work.realised_capacity(start, end, self.model.workers, self.model.capacity_rps)

    @property
    def worker_time(self) -> WorkerTime:
        """What its workers spent (``WorkerTime.draws``: each service's start, in the order
        they ended)."""
        return self._work

    def __init__(self, model: ToolModel, rng: random.Random) -> None:
        self.model = model
        self._rng = rng
        self._pool = anyio.Semaphore(model.workers)
        self._work = WorkerTime()
        self.inside = 0
        self.peak_inside = 0

    async def __call__(self) -> str:
        self.inside += 1
        self.peak_inside = max(self.peak_inside, self.inside)
        try:
            async with self._pool:
                service = self._rng.lognormvariate(self.model.mu, self.model.sigma)
                piled_up = max(0, self.inside - self.model.workers)
                await self._work.serve(service, piled_up, self.model.contention_scale)
        finally:
            self.inside -= 1
        return "ok"
