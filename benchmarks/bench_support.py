"""Benchmark machinery: figures are ratios measured side by side in one run.

Each figure test measures the project's operation and its baseline interleaved (so machine noise
hits both alike), keeps the best batch of each, and reports the ratio through the ``figures``
fixture. ``make bench`` (benchmarks enabled) runs every figure test, with all its rounds, and fails
when a figure misses its target as written in docs/benchmarks.md. ``make test`` runs the same code
with ``--benchmark-disable`` as a smoke test: a few short rounds, so its ratios are informational
(labelled so in the summary) and it fails only on a gross regression (a wide margin).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

GROSS_REGRESSION_MARGIN = 3.0
#: The smoke run's rounds: only this many of a figure's batches (the best of each side is kept:
#: on a loaded machine a stall rarely hits the same side in all five) ...
SMOKE_ROUNDS = 5
#: ... each a twentieth of a full batch: a millisecond or two, shorter than the time slice a
#: loaded machine gives a process, so that each side has batches that ran whole (a batch ten
#: times its baseline's length is nearly always cut, and its best inflates the ratio: 11.6x
#: against 3.3x at a load of 12 on two cores). Each batch's set-up (a fresh event loop:
#: 0.1-0.2 ms) then weighs on both sides alike and draws the ratio towards 1, which the smoke
#: run's wide margin allows for; a gross regression (3x the target) still shows. ``make bench``
#: times the full batches.
SMOKE_OPS_DIVISOR = 20


@dataclass(frozen=True)
class Figure:
    name: str
    candidate_s: float
    baseline_s: float
    target: str
    met: bool
    """Whether the figure meets its target (``make bench`` fails a figure that does not; the smoke
    run only fails on gross regressions and labels its figures informational)."""

    @property
    def ratio(self) -> float:
        """candidate cost / baseline cost (lower is better)."""
        return self.candidate_s / self.baseline_s


FIGURES: list[Figure] = []


def time_batches(
    candidate: Callable[[int], float],
    baseline: Callable[[int], float],
    *,
    ops: int,
    rounds: int,
) -> tuple[float, float]:
    """Best per-operation seconds of each, from ``rounds`` interleaved batches of ``ops``.

    Each callable runs ``ops`` operations and returns the elapsed seconds it measured.
    """
    best_candidate = best_baseline = float("inf")
    for _ in range(rounds):
        best_candidate = min(best_candidate, candidate(ops) / ops)
        best_baseline = min(best_baseline, baseline(ops) / ops)
    return best_candidate, best_baseline


def sync_batch(op: Callable[[], object]) -> Callable[[int], float]:
    """A batch runner for a synchronous operation."""

    def run(ops: int) -> float:
        start = time.perf_counter()
        for _ in range(ops):
            op()
        return time.perf_counter() - start

    return run


def async_batch(
    op: Callable[[], Awaitable[object]],
    *,
    event_loop: asyncio.AbstractEventLoop | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Callable[[int], float]:
    """A batch runner for an async operation, timed inside one asyncio event loop.

    Each batch runs in a fresh loop, or in ``event_loop`` when given: an operation holding
    loop-bound resources (a redis-py connection) needs the same loop batch after batch.
    ``clock``: what the batch is timed on (``time.thread_time`` for a figure against an absolute
    budget: the time the process waits for a core on a loaded machine is not the code's).
    """

    async def loop(ops: int) -> float:
        start = clock()
        for _ in range(ops):
            await op()
        return clock() - start

    def run(ops: int) -> float:
        if event_loop is not None:
            return event_loop.run_until_complete(loop(ops))
        return asyncio.run(loop(ops))

    return run


class Figures:
    """Records a figure and checks it against its target (strictly only under ``make bench``)."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict

    def time_batches(
        self,
        candidate: Callable[[int], float],
        baseline: Callable[[int], float],
        *,
        ops: int,
        rounds: int,
    ) -> tuple[float, float]:
        """:func:`time_batches` with all of a figure's rounds under ``make bench``; a few short
        ones in the smoke run, which only needs the code to run and a gross regression to show."""
        if not self.strict:
            rounds = min(rounds, SMOKE_ROUNDS)
            ops = max(1, ops // SMOKE_OPS_DIVISOR)
        return time_batches(candidate, baseline, ops=ops, rounds=rounds)

    def at_most(self, name: str, candidate_s: float, baseline_s: float, limit: float) -> Figure:
        """candidate must cost at most ``limit`` x baseline."""
        figure = Figure(
            name, candidate_s, baseline_s, f"<= {limit:g}x", candidate_s <= limit * baseline_s
        )
        FIGURES.append(figure)
        allowed = limit if self.strict else limit * GROSS_REGRESSION_MARGIN
        assert figure.ratio <= allowed, (
            f"{name}: {figure.ratio:.2f}x the baseline, target {figure.target}"
        )
        return figure

    def faster_by(self, name: str, candidate_s: float, baseline_s: float, factor: float) -> Figure:
        """candidate must be at least ``factor`` x faster than baseline."""
        met = baseline_s >= factor * candidate_s
        figure = Figure(name, candidate_s, baseline_s, f">= {factor:g}x faster", met)
        FIGURES.append(figure)
        needed = factor if self.strict else factor / GROSS_REGRESSION_MARGIN
        speedup = 1.0 / figure.ratio
        assert speedup >= needed, f"{name}: {speedup:.2f}x faster, target {figure.target}"
        return figure


def summary(figures: Sequence[Figure], strict: bool) -> tuple[str, list[str]]:
    """The title and lines of the figures table printed after a run.

    Under ``make bench`` a figure off its target is marked MISSED (and its test failed); in the
    smoke run the figures come from a few rounds, so the table says they are
    informational and a figure off its target is only noted.
    """
    if strict:
        title = "fusion_guard figures (ratios, same run; targets checked)"
        miss = "  << MISSED"
    else:
        title = (
            "fusion_guard figures (informational: a smoke run of a few short rounds under"
            " --benchmark-disable; `make bench` checks the targets)"
        )
        miss = "  (off target in this smoke run; not judged)"
    lines = [
        f"{f.name:<58} {f.candidate_s * 1e6:9.3f} us vs {f.baseline_s * 1e6:9.3f} us"
        f"  ratio {f.ratio:6.3f}  (speed-up {1 / f.ratio:6.2f}x)  target {f.target}"
        + ("" if f.met else miss)
        for f in figures
    ]
    if strict:
        missed = sum(not f.met for f in figures)
        lines.append(f"{missed} of {len(figures)} targets missed")
    return title, lines


class StandingQueue:
    """``queued`` callers circulating through one slot in their own event loop: the slot of
    ``guard`` (a ``ConcurrencyGuard`` of any tree), or of a bare ``asyncio.Semaphore(1)`` when
    ``guard`` is None (fair since Python 3.11.1: a release hands on to the first waiter, as the
    guard does).

    Each caller loops ``async with slot: pass``: handed the slot, it releases it (handing it to
    the head of the queue) and queues again at the tail, so the queue stays ``queued`` long.
    One batch operation (a yield of the driving task) lets exactly one acquire + release happen.
    """

    def __init__(self, queued: int, guard: Any = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.guard = guard
        self.semaphore = asyncio.Semaphore(1) if guard is None else None
        self.tasks: list[asyncio.Task[None]] = []
        self.loop.run_until_complete(self._start(queued))

    async def _caller(self) -> None:
        while True:
            async with self.guard.slot():
                pass

    async def _semaphore_caller(self) -> None:
        assert self.semaphore is not None
        while True:
            async with self.semaphore:
                pass

    async def _start(self, queued: int) -> None:
        if self.semaphore is not None:
            await self.semaphore.acquire()
            self.tasks = [asyncio.create_task(self._semaphore_caller()) for _ in range(queued)]
            await asyncio.sleep(0)
            self.semaphore.release()
            return
        held = self.guard.acquire_nowait()
        self.tasks = [asyncio.create_task(self._caller()) for _ in range(queued)]
        await asyncio.sleep(0)  # every new task runs once: each finds the slot held and queues
        assert self.guard.queued == queued
        held.release()  # the circulation starts: the head is handed the slot

    @staticmethod
    async def _step() -> None:
        await asyncio.sleep(0)

    def batch(self, clock: Callable[[], float] = time.perf_counter) -> Callable[[int], float]:
        return async_batch(self._step, event_loop=self.loop, clock=clock)

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*self.tasks, return_exceptions=True))
        self.loop.close()
