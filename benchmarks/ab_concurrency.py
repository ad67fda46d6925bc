"""The figures of ``test_bench_concurrency.py`` for two trees of the code, side by side in one run.

::

    git worktree add /tmp/fusion-guard-main main
    python benchmarks/ab_concurrency.py /tmp/fusion-guard-main/src/fusion_guard
    python benchmarks/ab_concurrency.py /tmp/fusion-guard-main/src/fusion_guard --rounds 30
    python benchmarks/ab_concurrency.py /tmp/fusion-guard-main/src/fusion_guard --cpu

A change to the admission core is judged against the code before it on the same machine at the
same moment: a machine shared with other work moves every figure by 10-15 % from one minute to
the next, far more than most changes do. So the other tree (``BASE``, the path of its
``fusion_guard`` package) is imported beside this one under another name, and each round times a
batch of each figure for the base, for this tree and for a bare ``asyncio.Semaphore``, in a
shuffled order (no figure always first or last). ``--cpu`` times the batches on the thread's CPU
time rather than the wall clock: the time the process waits for a core on a loaded machine is not
the code's, and inflates whichever side it hits. Printed: each figure over the semaphore, base
and this tree, and this tree over the base. Not collected by pytest (no ``test_`` prefix).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import random
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from prometheus_client import CollectorRegistry

from bench_support import StandingQueue
from bench_support import async_batch as timed

OPS = 20_000
TOOL = "billing.process_invoice"


def load_as(name: str, package: Path) -> ModuleType:
    """Import the package at ``package`` under ``name`` (its imports are relative: its modules
    load as ``name``'s)."""
    init = package / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        name, init, submodule_search_locations=[str(package)]
    )
    if not init.is_file() or spec is None or spec.loader is None:
        raise SystemExit(f"{package} is not a package (no __init__.py)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _section(guard: Any, client: str | None = None) -> Callable[[], Awaitable[object]]:
    async def section() -> None:
        async with guard.slot(client=client):
            pass

    return section


def _shed(fg: ModuleType) -> Callable[[], Awaitable[object]]:
    guard = fg.ConcurrencyGuard(1, max_queue=0, name=TOOL)
    guard.acquire_nowait()  # held for good: every call is refused

    async def section() -> object:
        try:
            async with guard.slot():
                pass
        except fg.ServerBusy as busy:
            return busy.response
        return None

    return section


def _figures(
    fg: ModuleType, hand_off: StandingQueue, clock: Callable[[], float]
) -> dict[str, Callable[[int], float]]:
    """Each figure's batch runner for the package ``fg``, named with its target, timed on
    ``clock``."""

    def async_batch(op: Callable[[], Awaitable[object]]) -> Callable[[int], float]:
        return timed(op, clock=clock)

    metrics = fg.PrometheusObserver(CollectorRegistry()).for_tool(TOOL, max_active=1)
    return {
        "fixed slot, metrics off (<= 1.5x)": async_batch(
            _section(fg.ConcurrencyGuard(1, name=TOOL))
        ),
        "fixed slot, metrics on (<= 3x)": async_batch(
            _section(fg.ConcurrencyGuard(1, name=TOOL, observer=metrics))
        ),
        "client key (<= 2x)": async_batch(_section(fg.ConcurrencyGuard(1, name=TOOL), "tenant-42")),
        "adaptive limit (<= 6x)": async_batch(
            _section(fg.ConcurrencyGuard(limit=fg.GradientLimit(), name=TOOL))
        ),
        "shed (<= 3x)": async_batch(_shed(fg)),
        "hand-off, 100 queued (<= 1.5x)": hand_off.batch(clock),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("base", type=Path, help="the other tree's fusion_guard package")
    parser.add_argument("--rounds", type=int, default=15, help="batches per figure (15)")
    parser.add_argument(
        "--cpu", action="store_true", help="time on the thread's CPU time, not the wall clock"
    )
    parser.add_argument(
        "--only", default="", help="run only the figures whose name contains this text"
    )
    args = parser.parse_args()
    clock = time.thread_time if args.cpu else time.perf_counter
    import fusion_guard as head

    if Path(head.__file__).parent.resolve() == args.base.resolve():
        parser.error("BASE is this tree's own package: give the other tree's")
    base = load_as("fusion_guard_base", args.base.resolve())
    circulating = [
        StandingQueue(100, base.ConcurrencyGuard(1, 100, 600.0, standing_limit=100,
                                                predictive=False)),
        StandingQueue(100, head.ConcurrencyGuard(1, 100, 600.0, standing_limit=100,
                                                predictive=False)),
        StandingQueue(100),
    ]  # fmt: skip
    before = _figures(base, circulating[0], clock)
    after = _figures(head, circulating[1], clock)
    semaphore = timed(_semaphore_section(), clock=clock)
    order = random.Random(1)
    print(f"{'figure':34} {'base/sem':>9} {'this/sem':>9} {'this/base':>10}")
    try:
        for name in before:
            if args.only not in name:
                continue
            baseline = circulating[2].batch(clock) if name.startswith("hand-off") else semaphore
            runs = {"base": before[name], "this": after[name], "sem": baseline}
            best = dict.fromkeys(runs, float("inf"))
            for _ in range(args.rounds):
                keys = list(runs)
                order.shuffle(keys)
                for key in keys:
                    best[key] = min(best[key], runs[key](OPS) / OPS)
            b, t, s = best["base"], best["this"], best["sem"]
            print(f"{name:34} {b / s:9.2f} {t / s:9.2f} {t / b:10.3f}", flush=True)
    finally:
        for each in circulating:
            each.close()
    return 0


def _semaphore_section() -> Callable[[], Awaitable[object]]:
    semaphore = asyncio.Semaphore(1)

    async def section() -> None:
        async with semaphore:
            pass

    return section


if __name__ == "__main__":
    sys.exit(main())
