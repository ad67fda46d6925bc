"""Warm bursts at a default ``Guard()`` over a grid, in virtual time: ``--calls`` callers
``gap`` apart at a tool of 2 workers (calls of ``hold`` seconds; more wait inside), each refused
caller back at exactly its ``retry_after``, after one such burst to warm the guard. Prints,
per gap and hold, when the last call was served over the ideal drain (calls x hold / 2), and
the range (docs/adaptive.md, "The first probe").

    python benchmarks/warm_burst_grid.py [--calls 30] [--gaps 0,2,5,10,20] [--holds 50,200]

The burst is the one ``tests/concurrency/test_concurrency_cold_burst.py`` checks
(``guarded_burst``); gaps and holds are in milliseconds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(_TESTS), str(_TESTS / "concurrency")]

from test_concurrency_cold_burst import guarded_burst  # noqa: E402

from virtual_time import run_virtual  # noqa: E402


def _milliseconds(text: str) -> list[float]:
    try:
        values = [float(part) / 1000 for part in text.split(",")]
    except ValueError:
        values = []
    if not values or any(value < 0 for value in values):
        raise argparse.ArgumentTypeError(f"expected milliseconds such as 0,5,10, got {text!r}")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--gaps", type=_milliseconds, default=_milliseconds("0,2,5,10,20"))
    parser.add_argument("--holds", type=_milliseconds, default=_milliseconds("50,200"))
    args = parser.parse_args()
    ratios = []
    for hold in args.holds:
        for gap in args.gaps:

            async def burst(gap: float = gap, hold: float = hold) -> float:
                return await guarded_burst(args.calls, gap, hold, warm=True)

            ratio = run_virtual(burst, "asyncio")
            ratios.append(ratio)
            print(f"{args.calls} callers {gap * 1000:g} ms apart, {hold * 1000:g} ms calls: "
                  f"{ratio:.2f}x the ideal drain")  # fmt: skip
    print(f"range: {min(ratios):.2f}-{max(ratios):.2f}x")


if __name__ == "__main__":
    main()
