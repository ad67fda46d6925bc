"""The library's whole refusal through an adapter's shared path, for two trees side by side.

::

    python benchmarks/ab_refusal.py /tmp/fusion-guard-main/src/fusion_guard
    python benchmarks/ab_refusal.py /tmp/fusion-guard-main/src/fusion_guard --rounds 40

The path most calls take under overload: ``admit_call`` at a full tool (the ticket, the guard's
refusal, its envelope, the span) and the result's ``_meta`` (``result_parts``), metrics off, as
``test_bench_wire.py``'s figure against its 4 us budget times it. The other tree (``BASE``, the
path of its ``fusion_guard`` package) is imported beside this one under another name, as in
``ab_concurrency.py``, and each round times a batch of each in a shuffled order: a machine shared
with other work moves such a figure by a third from one minute to the next. Printed: the best
and the median microseconds per refusal of each (the thread's CPU time; ``--wall``: the wall
clock), and the median over the rounds of this tree over the base (each round's two batches run
side by side). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType

from ab_concurrency import load_as

OPS = 2_000
TOOL = "search"
#: What a batch is timed with: this thread's CPU time, which a loaded machine inflates far less
#: than the wall clock (time spent descheduled is not counted; caches shared with other work
#: still are).
CLOCK = time.thread_time


def _refusal(fg: ModuleType) -> Callable[[], Awaitable[object]]:
    common = importlib.import_module(f"{fg.__name__}.integrations._common")
    guard = fg.Guard(metrics=False, max_active=1, max_queue=0)
    guard.concurrency(TOOL).acquire_nowait()  # one slot, held: every call is refused
    retries = common.RetryWindows()

    async def never() -> object:
        raise AssertionError("a refused call never reaches the tool")

    async def refusal() -> object:
        response = await common.admit_call(
            guard, TOOL, never, request=None, client_key=None, failed=bool, retries=retries
        )
        return common.result_parts(response, None)[3]

    return refusal


async def _times(
    runs: dict[str, Callable[[], Awaitable[object]]], rounds: int
) -> dict[str, list[float]]:
    """Seconds per refusal of each batch of each run, round by round (paired: one round times
    each run once, in a shuffled order)."""

    async def batch(op: Callable[[], Awaitable[object]]) -> float:
        start = CLOCK()
        for _ in range(OPS):
            await op()
        return (CLOCK() - start) / OPS

    for op in runs.values():  # the gates, the templates and the log observers' windows
        await batch(op)
    times: dict[str, list[float]] = {key: [] for key in runs}
    order = random.Random(1)
    for _ in range(rounds):
        keys = list(runs)
        order.shuffle(keys)
        for key in keys:
            times[key].append(await batch(runs[key]))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("base", type=Path, help="the other tree's fusion_guard package")
    parser.add_argument("--rounds", type=int, default=20, help="batches of each (20)")
    parser.add_argument(
        "--wall", action="store_true", help="time batches on the wall clock, not CPU time"
    )
    args = parser.parse_args()
    if args.wall:
        global CLOCK
        CLOCK = time.perf_counter
    import fusion_guard as head

    if Path(head.__file__).parent.resolve() == args.base.resolve():
        parser.error("BASE is this tree's own package: give the other tree's")
    base = load_as("fusion_guard_base", args.base.resolve())
    runs = {"base": _refusal(base), "this": _refusal(head)}
    times = asyncio.run(_times(runs, args.rounds))
    b, t = times["base"], times["this"]
    ratio = statistics.median(this / base for this, base in zip(t, b, strict=True))
    median_b, median_t = statistics.median(b) * 1e6, statistics.median(t) * 1e6
    print(f"refusal via admit_call + _meta: best base {min(b) * 1e6:.2f} us, this"
          f" {min(t) * 1e6:.2f} us; median base {median_b:.2f} us, this {median_t:.2f} us;"
          f" this/base, median of the rounds {ratio:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
