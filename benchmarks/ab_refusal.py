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
microseconds per refusal of each, and this tree over the base. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import random
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType

from ab_concurrency import load_as

OPS = 2_000
TOOL = "search"


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


async def _best(runs: dict[str, Callable[[], Awaitable[object]]], rounds: int) -> dict[str, float]:
    async def batch(op: Callable[[], Awaitable[object]]) -> float:
        start = time.perf_counter()
        for _ in range(OPS):
            await op()
        return (time.perf_counter() - start) / OPS

    for op in runs.values():  # the gates, the templates and the log observers' windows
        await batch(op)
    best = dict.fromkeys(runs, float("inf"))
    order = random.Random(1)
    for _ in range(rounds):
        keys = list(runs)
        order.shuffle(keys)
        for key in keys:
            best[key] = min(best[key], await batch(runs[key]))
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("base", type=Path, help="the other tree's fusion_guard package")
    parser.add_argument("--rounds", type=int, default=20, help="batches of each (20)")
    args = parser.parse_args()
    import fusion_guard as head

    if Path(head.__file__).parent.resolve() == args.base.resolve():
        parser.error("BASE is this tree's own package: give the other tree's")
    base = load_as("fusion_guard_base", args.base.resolve())
    runs = {"base": _refusal(base), "this": _refusal(head)}
    best = asyncio.run(_best(runs, args.rounds))
    b, t = best["base"], best["this"]
    print(f"refusal via admit_call + _meta: base {b * 1e6:.2f} us, this {t * 1e6:.2f} us,"
          f" this/base {t / b:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
