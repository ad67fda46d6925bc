"""Benchmark machinery: figures are ratios measured side by side in one run.

Each figure test measures the project's operation and its baseline interleaved (so machine noise
hits both alike), keeps the best batch of each, and reports the ratio through the ``figures``
fixture. ``make bench`` (benchmarks enabled) checks every target as written in docs/benchmarks.md;
``make test`` runs the same code with ``--benchmark-disable`` as a smoke test and only fails on a
gross regression (a wide margin), because shared CI machines are noisy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

GROSS_REGRESSION_MARGIN = 3.0


@dataclass(frozen=True)
class Figure:
    name: str
    candidate_s: float
    baseline_s: float
    target: str
    met: bool
    """Whether the figure meets its target (the smoke run only fails on gross regressions, so
    a missed target is marked in the summary rather than failing the run)."""

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
    op: Callable[[], Awaitable[object]], *, event_loop: asyncio.AbstractEventLoop | None = None
) -> Callable[[int], float]:
    """A batch runner for an async operation, timed inside one asyncio event loop.

    Each batch runs in a fresh loop, or in ``event_loop`` when given: an operation holding
    loop-bound resources (a redis-py connection) needs the same loop batch after batch.
    """

    async def loop(ops: int) -> float:
        start = time.perf_counter()
        for _ in range(ops):
            await op()
        return time.perf_counter() - start

    def run(ops: int) -> float:
        if event_loop is not None:
            return event_loop.run_until_complete(loop(ops))
        return asyncio.run(loop(ops))

    return run


class Figures:
    """Records a figure and checks it against its target (strictly only under ``make bench``)."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict

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
