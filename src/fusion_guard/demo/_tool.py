"""A tool that stands for a scarce resource: a hidden pool of workers with log-normal service
times, which degrades when too many calls pile up inside it (as a database does when its clients
exhaust the pool and thrash)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import anyio

__all__ = ["SimulatedTool", "ToolModel"]

_Z99 = 2.3263478740408408  # the standard normal's 99th percentile


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
        """Calls per second the workers could serve with the service times they really had for
        services begun in ``[start, end)`` (the nominal capacity when there were none).

        With sigma = 1 the mean of a few hundred draws strays by several per cent from the
        model's mean, and every sleep overshoots by up to a timer tick; dividing goodput by this
        capacity keeps that luck and that harness cost out of the policies' figures."""
        drawn = [service for begun, service in self.draws if start <= begun < end]
        if not drawn:
            return self.model.capacity_rps
        return self.model.workers * len(drawn) / sum(drawn)

    def __init__(self, model: ToolModel, rng: random.Random) -> None:
        self.model = model
        self._rng = rng
        self._pool = anyio.Semaphore(model.workers)
        self.inside = 0
        self.peak_inside = 0
        self.draws: list[tuple[float, float]] = []
        """(start, service time without contention slowdown) of every service finished."""

    async def __call__(self) -> str:
        self.inside += 1
        self.peak_inside = max(self.peak_inside, self.inside)
        try:
            async with self._pool:
                piled_up = max(0, self.inside - self.model.workers)
                slowdown = 1.0 + piled_up / self.model.contention_scale
                service = self._rng.lognormvariate(self.model.mu, self.model.sigma)
                begun = anyio.current_time()
                await anyio.sleep(service * slowdown)
                # What a worker really spent, less the contention slowdown (the policy's fault,
                # not the tool's): the draw plus the event loop's timer overshoot.
                spent = anyio.current_time() - begun - service * (slowdown - 1.0)
                self.draws.append((begun, spent))
        finally:
            self.inside -= 1
        return "ok"
