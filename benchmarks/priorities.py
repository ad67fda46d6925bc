"""Interactive and background agents on one tool, priority-blind vs priority-aware, in virtual time.

    python benchmarks/priorities.py --seeds 1-3                 # 3x capacity, 20 % interactive
    python benchmarks/priorities.py --seeds 1-3 --load 2 --interactive 0.3

The tool is the demo's model with 4 workers (20 ms log-normal service, sigma 1: capacity about
200 calls/s) behind ``Guard()`` at its defaults (``max_active="auto"``). Interactive calls come
from three clients, background calls from two whose demands are 10:1; arrivals are open-loop
Poisson, drawn once per seed, and the blind guard and the aware one receive the very same
arrivals and service draws, side by side in one trio run under a mock clock (as
``virtual_demo.py`` runs the demos). Aware: the background clients' calls carry
``priority="background"``; blind: no call carries a priority. Clients give up after 10 s.

Figures over 20 s after a 5 s warm-up: interactive calls answered OK, interactive p99 over the
tool's uncontended p99, each class's goodput as a share of the capacity the workers really had,
and each background client's goodput over a max-min fair share of what background received. The
targets (issue 42) are checked for the aware guard. A stand-alone measurement, not yet the
``fusion-guard demo --scenario priorities`` the issue asks for.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import trio
from trio.testing import MockClock

_real_monotonic = time.monotonic


def _monotonic() -> float:
    try:
        return trio.current_time()
    except RuntimeError:
        return _real_monotonic()


INTERACTIVE = ("chat-1", "chat-2", "chat-3")
BACKGROUND = {"batch-big": 10.0, "batch-small": 1.0}
WARMUP, DURATION, CLIENT_TIMEOUT = 5.0, 20.0, 10.0


def _run(seed: int, load: float, interactive: float) -> dict[str, Any]:
    import anyio

    from fusion_guard import Guard, ServerBusy
    from fusion_guard.demo._loadgen import CallRecord, drive_tool, percentile, poisson_arrivals
    from fusion_guard.demo._tool import SimulatedTool, ToolModel

    model = ToolModel(workers=4)
    capacity = model.capacity_rps
    demand = {name: load * interactive / len(INTERACTIVE) for name in INTERACTIVE}
    weights = sum(BACKGROUND.values())
    demand |= {name: load * (1 - interactive) * w / weights for name, w in BACKGROUND.items()}

    async def main() -> dict[str, Any]:
        begin = anyio.current_time()
        start, end = begin + WARMUP, begin + WARMUP + DURATION
        arrivals = {
            name: poisson_arrivals(
                share * capacity, begin, end - begin, random.Random(f"{seed}:prio:{name}")
            )
            for name, share in demand.items()
        }
        modes = ("blind", "aware")
        tools = {m: SimulatedTool(model, random.Random(f"{seed}:prio:service")) for m in modes}
        guards = {m: Guard(metrics=False) for m in modes}
        records: dict[tuple[str, str], list[CallRecord]] = {
            (m, name): [] for m in modes for name in demand
        }

        def through(mode: str, client: str) -> Callable[[SimulatedTool], Any]:
            priority = "background" if mode == "aware" and client in BACKGROUND else None

            async def call(tool: SimulatedTool) -> str:
                try:
                    async with guards[mode].admit("tool", client=client, priority=priority):
                        await tool()
                except ServerBusy:
                    return "shed"
                return "ok"

            return call

        async with anyio.create_task_group() as tg:
            for mode, name in records:
                tg.start_soon(
                    lambda m=mode, n=name: drive_tool(
                        arrivals[n],
                        through(m, n),
                        tools[m],
                        client_timeout=CLIENT_TIMEOUT,
                        records=records[m, n],
                    )
                )
        figures: dict[str, Any] = {}
        for mode in modes:
            real = tools[mode].realised_capacity(start, end) * DURATION
            served: dict[str, float] = {}
            for name in demand:
                served[name] = (
                    sum(
                        1
                        for r in records[mode, name]
                        if r.outcome == "ok" and start <= r.intended + r.latency < end
                    )
                    / real
                )
            inside = [r for n in INTERACTIVE for r in records[mode, n] if start <= r.intended < end]
            ok = sum(r.outcome == "ok" for r in inside) / max(1, len(inside))
            p99 = percentile([r.latency for r in inside if r.outcome == "ok"], 0.99)
            inter = sum(served[n] for n in INTERACTIVE)
            back = sum(served[n] for n in BACKGROUND)
            # Max-min fair split of what background received, between its two clients.
            asks = {n: demand[n] for n in BACKGROUND}
            small = min(asks, key=asks.__getitem__)
            fair_small = min(asks[small], back / 2)
            fair = {small: fair_small, max(asks, key=asks.__getitem__): back - fair_small}
            figures[mode] = {
                "interactive_ok": round(ok, 4),
                "interactive_p99_x": None
                if p99 is None
                else round(p99 / model.uncontended_p99_s, 3),
                "interactive_goodput": round(inter, 4),
                "background_goodput": round(back, 4),
                "total_goodput": round(inter + back, 4),
                "background_fair_ratio": {
                    n: round(served[n] / fair[n], 3) if fair[n] else None for n in BACKGROUND
                },
            }
        return figures

    shuffle = getattr(getattr(trio, "_core", None), "_run", None)
    if shuffle is not None and hasattr(shuffle, "_r"):
        shuffle._r.seed(seed)
    return trio.run(main, clock=MockClock(autojump_threshold=0))


def _targets(aware: dict[str, Any], load: float) -> list[str]:
    missed = []
    p99_bound = 1.5 if load >= 3 else 1.6
    if aware["interactive_ok"] < 0.99:
        missed.append(f"interactive OK {aware['interactive_ok']:.3f} < 0.99")
    if aware["interactive_p99_x"] is None or aware["interactive_p99_x"] > p99_bound:
        missed.append(f"interactive p99 {aware['interactive_p99_x']}x > {p99_bound}x")
    if load >= 3:
        if aware["background_goodput"] < 0.85 * (1 - aware["interactive_goodput"]):
            missed.append("background goodput < 0.85 x (capacity - interactive)")
        if aware["total_goodput"] < 0.95:
            missed.append(f"total goodput {aware['total_goodput']:.3f} < 0.95")
    for name, ratio in aware["background_fair_ratio"].items():
        if ratio is not None and ratio < 0.9:
            missed.append(f"{name} {ratio:.3f} of a fair share < 0.9")
    return missed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-3")
    parser.add_argument("--load", type=float, default=3.0, help="x capacity (default 3)")
    parser.add_argument("--interactive", type=float, default=0.2, help="share of the calls")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    first, _, last = args.seeds.partition("-")
    seeds = range(int(first), int(last or first) + 1)
    time.monotonic = _monotonic  # the guard's default clock, before fusion_guard is imported
    out = {}
    met = 0
    for seed in seeds:
        figures = _run(seed, args.load, args.interactive)
        missed = _targets(figures["aware"], args.load)
        met += not missed
        out[seed] = {**figures, "missed": missed}
        print(f"seed {seed:2d} blind {json.dumps(figures['blind'])}")
        print(f"        aware {json.dumps(figures['aware'])}")
        print(f"        {'PASS' if not missed else 'MISS: ' + '; '.join(missed)}")
    print(f"{met} of {len(seeds)} seeds met every target")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(out, file, indent=1)
    return 0 if met == len(seeds) else 1


if __name__ == "__main__":
    sys.exit(main())
