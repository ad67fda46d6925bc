"""The tool zoo's simulated tools: what a model's ``make_tool()`` returns (docs/zoo.md).

Tools are async, read the event loop's clock and hold no thread, so a run in virtual time repeats
exactly for a seed; the same tools run on the real clock for the spot checks.

The errors the tools raise are the ones real tools raise: ``PoolExhausted`` (a connection pool
that refuses at once), ``UpstreamRateLimited`` (an API's 429), ``BackendDown`` (every call fails
at once) and ``BadInput`` (a load-independent error: the caller's arguments).
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass

import anyio

from ._shifting import _Pool
from ._tool import WorkerTime

__all__ = [
    "FAST_ERROR_S",
    "BackendDown",
    "BadInput",
    "CpuTool",
    "FailFastTool",
    "Job",
    "PoolExhausted",
    "QueueingTool",
    "SlidingUpstreamTool",
    "UpstreamRateLimited",
    "UpstreamTool",
    "WindowUpstreamTool",
    "ZooTool",
    "lognormal",
]

#: How long a tool takes to raise an error that needs no work: a refusal, bad input, a backend
#: that is down (seconds).
FAST_ERROR_S = 0.001


class PoolExhausted(Exception):
    """Every connection of the pool is busy (as SQLAlchemy's ``TimeoutError`` with no wait)."""


class UpstreamRateLimited(Exception):
    """The upstream API answered 429: its own rate limit is exceeded."""


class BackendDown(ConnectionError):
    """The backend is unreachable: every call fails at once."""


class BadInput(ValueError):
    """The caller's arguments are wrong: an error whatever the load."""


@dataclass(frozen=True, slots=True)
class Job:
    """One call's work, drawn once per arrival: ``service`` (seconds of a worker, or of CPU for
    ``CpuThreads``, or the upstream's latency) and whether its input is bad."""

    service: float
    bad: bool = False


def lognormal(rng: random.Random, mean: float, sigma: float) -> float:
    return rng.lognormvariate(math.log(mean) - sigma**2 / 2, sigma)


class ZooTool:
    """``await tool(job)``: one call. Bad input fails at once (no connection taken), so does any
    call while the backend is down (``down`` between two loop times); otherwise ``_work``.
    ``entered`` counts the calls that reached the tool (probes, during an outage)."""

    def __init__(self) -> None:
        self.down: tuple[float, float] | None = None
        self.entered: list[float] = []

    async def __call__(self, job: Job) -> str:
        now = anyio.current_time()
        self.entered.append(now)
        if job.bad:
            await anyio.sleep(FAST_ERROR_S)
            raise BadInput("unknown customer id")
        if self.down is not None and self.down[0] <= now < self.down[1]:
            await anyio.sleep(FAST_ERROR_S)
            raise BackendDown("connection refused")
        await self._work(job)
        return "ok"

    async def _work(self, job: Job) -> None:
        raise NotImplementedError

    def set_workers(self, workers: int) -> None:
        """The true parallel worker count changes (``ShiftingPool``)."""
        raise NotImplementedError


class QueueingTool(ZooTool):
    """A FIFO pool of workers; calls beyond it wait inside, and each call waiting slows every
    service by ``1 / contention_scale`` (a crowded database thrashing)."""

    def __init__(self, workers: int, contention_scale: float) -> None:
        super().__init__()
        self.pool = _Pool(workers)
        self._scale = contention_scale
        self._time = WorkerTime()
        self.inside = 0

    async def _work(self, job: Job) -> None:
        self.inside += 1
        try:
            await self.pool.acquire()
            try:
                piled_up = max(0, self.inside - self.pool.workers)
                await self._time.serve(job.service, piled_up, self._scale)
            finally:
                self.pool.release()
        finally:
            self.inside -= 1

    def set_workers(self, workers: int) -> None:
        self.pool.resize(workers)


class FailFastTool(ZooTool):
    def __init__(self, connections: int) -> None:
        super().__init__()
        self._free = connections
        self._time = WorkerTime()

    async def _work(self, job: Job) -> None:
        if self._free == 0:
            await anyio.sleep(FAST_ERROR_S)
            raise PoolExhausted("QueuePool limit reached, connection timed out, timeout 0")
        self._free -= 1
        try:
            await self._time.serve(job.service, 0, math.inf)
        finally:
            self._free += 1


class UpstreamTool(ZooTool):
    """A token bucket at the upstream: a call that finds no token is answered 429 quickly."""

    def __init__(self, rate: float, burst: int, reject_s: float) -> None:
        super().__init__()
        self._rate, self._burst, self._reject_s = rate, burst, reject_s
        self._tokens = float(burst)
        self._at: float | None = None
        self._time = WorkerTime()

    def _admits(self, now: float) -> bool:
        if self._at is not None:
            self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    async def _work(self, job: Job) -> None:
        if not self._admits(anyio.current_time()):
            await anyio.sleep(self._reject_s)
            raise UpstreamRateLimited("429 Too Many Requests")
        await self._time.serve(job.service, 0, math.inf)


class WindowUpstreamTool(UpstreamTool):
    """A fixed window at the upstream: ``rate x window_s`` calls per window of ``window_s``
    seconds (counted from the first call), a call past them answered 429 quickly."""

    def __init__(self, rate: float, window_s: float, reject_s: float) -> None:
        super().__init__(rate, 0, reject_s)
        self._window_s = window_s
        self._quota = round(rate * window_s)
        self._used = 0
        self._window_at: float | None = None

    def _admits(self, now: float) -> bool:
        if self._window_at is None:
            self._window_at = now
        elif now >= self._window_at + self._window_s:
            self._window_at += self._window_s * ((now - self._window_at) // self._window_s)
            self._used = 0
        if self._used >= self._quota:
            return False
        self._used += 1
        return True


class SlidingUpstreamTool(UpstreamTool):
    """A sliding-window log at the upstream: at most ``rate x window_s`` calls admitted in any
    trailing ``window_s`` seconds, a call past them answered 429 quickly."""

    def __init__(self, rate: float, window_s: float, reject_s: float) -> None:
        super().__init__(rate, 0, reject_s)
        self._window_s = window_s
        self._quota = round(rate * window_s)
        self._log: deque[float] = deque()

    def _admits(self, now: float) -> bool:
        log = self._log
        while log and log[0] <= now - self._window_s:
            log.popleft()
        if len(log) >= self._quota:
            return False
        log.append(now)
        return True


class CpuTool(ZooTool):
    """A sync handler run in a pool of ``threads`` threads (anyio's ``to_thread`` with a
    limiter): its CPU work runs in slices of ``slice_s`` (the interpreter's switch interval) on
    ``cores`` cores, round robin among the threads that hold work, so more threads than cores
    only share the cores. Once a thread has the call it runs to the end: a thread cannot be
    cancelled (``to_thread.run_sync`` waits for it), only the wait for a thread can."""

    def __init__(self, threads: int, cores: int, slice_s: float) -> None:
        super().__init__()
        self._threads = _Pool(threads)
        self._cores = _Pool(cores)
        self._slice = slice_s

    async def _work(self, job: Job) -> None:
        await self._threads.acquire()
        try:
            with anyio.CancelScope(shield=True):
                left = job.service
                while left > 1e-12:
                    await self._cores.acquire()
                    try:
                        step = min(self._slice, left)
                        await anyio.sleep(step)
                        left -= step
                    finally:
                        self._cores.release()
        finally:
            self._threads.release()
