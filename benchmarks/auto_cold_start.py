"""A fresh guard's first burst: ``--calls`` calls of ``--hold`` seconds, ``--gap`` seconds apart
(5 ms, as over a real transport; 0 for all at one instant), through ``Guard(max_active=10)`` and
``Guard(max_active="auto")``, on an idle tool that could serve them all at once. Prints when the
last one answered.

    python benchmarks/auto_cold_start.py [--calls 8] [--hold 0.5] [--gap 0.005]

A new automatic limit runs at its initial limit (4 slots) while it measures the tool's uncrowded
latency from the calls that come, so a burst of 8 takes two rounds where a fixed 10 takes one (it
took eight, one call at a time, when the measurement began with a probe at 1 slot;
docs/adaptive.md).
"""

from __future__ import annotations

import argparse
from typing import Literal

import anyio

from fusion_guard import Guard


async def first_burst(
    max_active: int | Literal["auto"],
    calls: int,
    hold: float,
    gap: float = 0.0,
) -> float:
    """Seconds until the last of ``calls`` calls to a fresh guard, ``gap`` seconds apart,
    answered OK (from the first call). The guard reads the loop's clock, so a loop in virtual
    time (as the tests run it) runs the burst in virtual time."""
    guard = Guard(max_active=max_active, clock=anyio.current_time)

    async def tool() -> str:
        await anyio.sleep(hold)
        return "ok"

    async def one(index: int) -> None:
        await anyio.sleep(index * gap)
        response = await guard.call("search", tool)
        assert not response.is_error, response.text

    began = anyio.current_time()
    async with anyio.create_task_group() as tg:
        for index in range(calls):
            tg.start_soon(one, index)
    return anyio.current_time() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--hold", type=float, default=0.5, help="seconds per call")
    parser.add_argument("--gap", type=float, default=0.005, help="seconds between arrivals")
    args = parser.parse_args()
    for max_active in (10, "auto"):
        took = anyio.run(first_burst, max_active, args.calls, args.hold, args.gap)
        print(
            f"max_active={max_active!s:4}  {args.calls} calls of {args.hold} s,"
            f" {args.gap * 1000:g} ms apart:"
            f" the last answered after {took:.2f} s"
        )


if __name__ == "__main__":
    main()
