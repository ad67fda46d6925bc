"""How late the event loop ends a simulated worker's sleep: ``--sleeps`` log-normal service
times of the demo's tool (20 ms mean, sigma 1), slept one after another with a plain
``anyio.sleep`` and with the demo's ``PunctualSleep``, on asyncio and trio. Prints the mean
time each held beyond its draw, and what that costs the tool's capacity.

    python benchmarks/timer_lateness.py [--sleeps 300]

A plain sleep ends late by part of a timer tick (0.80-0.84 ms on asyncio, 0.72 ms on trio, on
this project's 2-core machine on 2026-12-05: the demo's tool then served about 4 % below its
model); ``PunctualSleep`` asks to wake early by the lateness it has seen (docs/demo.md).
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections.abc import Awaitable, Callable

import anyio

from fusion_guard.demo._tool import PunctualSleep, ToolModel

SEED = 1


async def mean_lateness(sleep: Callable[[float], Awaitable[None]], sleeps: int) -> float:
    """Mean seconds ``sleep`` held beyond each of ``sleeps`` draws (the first tenth, while a
    ``PunctualSleep`` learns, left out)."""
    model = ToolModel()
    rng = random.Random(SEED)
    late: list[float] = []
    for _ in range(sleeps):
        service = rng.lognormvariate(model.mu, model.sigma)
        begun = anyio.current_time()
        await sleep(service)
        late.append(anyio.current_time() - begun - service)
    return statistics.fmean(late[sleeps // 10 :])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sleeps", type=int, default=300, help="per kind of sleep (default 300)")
    args = parser.parse_args(argv)
    if args.sleeps < 10:
        parser.error(f"--sleeps must be at least 10, got {args.sleeps}")
    mean_service = ToolModel().mean_service_s
    for backend in ("asyncio", "trio"):
        plain = anyio.run(mean_lateness, anyio.sleep, args.sleeps, backend=backend)
        punctual = anyio.run(mean_lateness, PunctualSleep(), args.sleeps, backend=backend)
        for name, late in (("anyio.sleep", plain), ("PunctualSleep", punctual)):
            print(
                f"{backend:7}  {name:13}  held {late * 1e3:+.3f} ms beyond its draw on average:"
                f" capacity {mean_service / (mean_service + late):.3f} of the model's"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
