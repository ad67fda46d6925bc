"""Tools that fail under load, in front of the real ConcurrencyGuard, in virtual time.

::

    python benchmarks/error_sim.py                 # every scenario, seeds 1-3
    python benchmarks/error_sim.py --seeds 4-8     # seeds not tuned on
    python benchmarks/error_sim.py --only independent --queuing-pool 16   # other widths

The guard runs as it is (``ConcurrencyGuard``, its queue, its refusals), on trio with a mock
clock that jumps to the next timer whenever every task waits: time passes in sleeps only, so a
20 s run takes about a second and the same seed gives the same figures. Every policy of a seed
is offered the same arrivals, the same of them with bad input (streams of their own). The tools:

- **fail-fast pool**: ``pool`` connections; a call that finds them all taken raises
  ``PoolExhausted`` after 1 ms, one that gets one holds it for its service (40 ms, log-normal
  sigma 0.1). Offered ``load`` times the pool's capacity in Poisson arrivals; policies: a fixed
  limit of the pool's size (the oracle), fixed 10, ``auto`` with ``overload_errors`` named, and
  ``auto`` with nothing named (the unnamed detection).
- **load-independent errors**: a pool that queues (no fail-fast), 8 connections
  (``--queuing-pool``), 20 % of calls raise ``ValueError`` after 1 ms whatever the load; and
  the same pool without errors (``auto, no errors``), since what a fresh guard sheds there is
  mostly its first seconds (4 calls in flight at half the load, its initial limit 4: crowded
  from the start), not the errors.
- **outage**: the fail-fast pool, every call failing at once for 10 s in the middle of a run;
  how many calls a second reach the tool during it, and how soon goodput is back after it.

Printed per scenario and seed: goodput (calls answered ok per second) against the oracle's,
overload errors as a share of admitted calls, the share of the excess load (arrivals beyond what
the oracle served) answered SERVER_BUSY with a ``retry_after``, and the limit's mean.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import trio
from trio.testing import MockClock

from fusion_guard import ServerBusy
from fusion_guard.admission._adaptive import GradientLimit
from fusion_guard.admission._concurrency import ConcurrencyGuard


class PoolExhausted(Exception):
    """The pool had no free connection."""


@dataclass
class Run:
    ok: int = 0
    errors: int = 0  # overload errors (PoolExhausted)
    other_errors: int = 0  # load-independent ones
    busy: int = 0  # SERVER_BUSY with a retry_after
    busy_without_advice: int = 0
    admitted: int = 0
    arrivals: int = 0
    ok_times: list[float] = field(default_factory=list)
    limits: list[float] = field(default_factory=list)
    tool_calls: list[float] = field(default_factory=list)  # when calls reached the tool
    arrived: list[float] = field(default_factory=list)

    def goodput(self, seconds: float) -> float:
        return self.ok / seconds


@dataclass
class Tool:
    pool: int
    service: float = 0.04
    sigma: float = 0.1
    fail_fast: bool = True
    random_errors: float = 0.0
    down: tuple[float, float] | None = None  # (from, to): every call fails at once
    busy: int = 0

    async def call(self, rng: random.Random, run: Run, bad_input: bool = False) -> None:
        """One call; ``bad_input``: it fails with ``ValueError`` whatever the load (drawn per
        arrival by ``simulate``, so every policy of a seed sees the same calls fail)."""
        now = trio.current_time()
        run.tool_calls.append(now)
        if self.down is not None and self.down[0] <= now < self.down[1]:
            await trio.sleep(0.001)
            raise PoolExhausted
        if bad_input:
            await trio.sleep(0.001)
            raise ValueError("bad input")
        if self.busy >= self.pool and self.fail_fast:
            await trio.sleep(0.001)
            raise PoolExhausted
        mu = math.log(self.service) - self.sigma**2 / 2
        self.busy += 1
        try:
            inside = max(0, self.busy - self.pool)  # beyond the pool, calls share it
            await trio.sleep(rng.lognormvariate(mu, self.sigma) * (1 + inside / self.pool))
        finally:
            self.busy -= 1


def simulate(
    tool: Tool,
    *,
    policy: str,
    load: float,
    seconds: float = 20.0,
    seed: int = 1,
    queue_timeout: float = 0.5,
) -> Run:
    """One run: ``policy`` is ``oracle`` (fixed at the pool), ``fixed10``, ``auto`` (overload
    errors named) or ``auto-unnamed``."""
    rng = random.Random(seed)  # service times
    # The arrivals and which of them have bad input, each from a stream of its own, so that
    # every policy of a seed is offered the same calls. Drawn from ``rng`` between the service
    # times, they followed the order each policy admitted calls in: at 16 connections, one
    # seed's oracle was offered 2053 calls and ``auto`` 1967, and goodput against the oracle's
    # moved by 2-5 % with that alone.
    arrivals = random.Random(f"arrivals {seed}")
    bad_inputs = random.Random(f"bad input {seed}")
    run = Run()
    capacity = tool.pool / tool.service

    async def main() -> None:
        named: tuple[type[BaseException], ...] = (PoolExhausted,) if policy == "auto" else ()
        if policy == "oracle":
            guard = ConcurrencyGuard(
                tool.pool, queue_timeout=queue_timeout, clock=trio.current_time
            )
        elif policy == "fixed10":
            guard = ConcurrencyGuard(10, queue_timeout=queue_timeout, clock=trio.current_time)
        else:
            guard = ConcurrencyGuard(
                limit=GradientLimit(),
                queue_timeout=queue_timeout,
                overload_errors=named,
                clock=trio.current_time,
            )

        async def one(bad_input: bool) -> None:
            try:
                async with guard.slot():
                    run.admitted += 1
                    await tool.call(rng, run, bad_input)
                run.ok += 1
                run.ok_times.append(trio.current_time())
            except ServerBusy as busy:
                if busy.retry_after is not None and busy.retry_after > 0:
                    run.busy += 1
                else:
                    run.busy_without_advice += 1
            except PoolExhausted:
                run.errors += 1
            except ValueError:
                run.other_errors += 1

        async def sample_limit() -> None:
            while True:
                run.limits.append(guard.limit)
                await trio.sleep(0.05)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sample_limit)
            now = 0.0
            while True:
                now += arrivals.expovariate(load * capacity)
                if now >= seconds:
                    break
                await trio.sleep_until(now)
                run.arrivals += 1
                run.arrived.append(now)
                nursery.start_soon(one, bad_inputs.random() < tool.random_errors)
            await trio.sleep(2.0)  # the last calls end
            nursery.cancel_scope.cancel()

    trio.run(main, clock=_seeded(seed))
    return run


def _seeded(seed: int) -> MockClock:
    """A mock clock, and trio's shuffle of tasks ready together seeded: the same seed gives the
    same run (as ``virtual_demo.py`` does)."""
    shuffle = getattr(getattr(trio, "_core", None), "_run", None)
    if shuffle is not None and hasattr(shuffle, "_r"):
        shuffle._r.seed(seed)
    return MockClock(autojump_threshold=0)


def _seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def fail_fast(seeds: list[int], pool: int = 4) -> list[dict[str, float]]:
    rows = []
    for load in (2.0, 3.0):
        for seed in seeds:
            runs = {
                p: simulate(Tool(pool), policy=p, load=load, seed=seed)
                for p in ("oracle", "fixed10", "auto", "auto-unnamed")
            }
            oracle = runs["oracle"]
            for name, run in runs.items():
                excess = max(1, run.arrivals - oracle.ok)
                row = {
                    "load": load,
                    "seed": seed,
                    "policy": name,
                    "goodput_vs_oracle": run.ok / max(1, oracle.ok),
                    "overload_errors": run.errors / max(1, run.admitted),
                    "busy_of_excess": run.busy / excess,
                    "mean_limit": statistics.mean(run.limits),
                }
                rows.append(row)
                print(
                    f"fail-fast pool {pool}, {load:.0f}x, seed {seed}, {name:12s}"
                    f" goodput {row['goodput_vs_oracle']:.3f}x oracle"
                    f"  overload errors {row['overload_errors'] * 100:5.1f} % of admitted"
                    f"  SERVER_BUSY {row['busy_of_excess'] * 100:5.1f} % of the excess"
                    f"  limit {row['mean_limit']:.1f}"
                )
    return rows


def independent(seeds: list[int], pool: int = 8) -> None:
    for seed in seeds:
        tool: Callable[[], Tool] = lambda: Tool(pool, fail_fast=False, random_errors=0.2)  # noqa: E731
        with_errors = simulate(tool(), policy="oracle", load=0.5, seed=seed)
        without = simulate(Tool(pool, fail_fast=False), policy="oracle", load=0.5, seed=seed)
        for name, made, oracle in (
            ("auto", tool(), with_errors),
            ("auto-unnamed", tool(), with_errors),
            ("auto, no errors", Tool(pool, fail_fast=False), without),
        ):
            run = simulate(made, policy=name.split(",")[0], load=0.5, seed=seed)
            print(
                f"20 % load-independent errors, 0.5x, seed {seed}, {name:15s}"
                f" goodput {run.ok / max(1, oracle.ok):.3f}x oracle"
                f"  shed {(run.busy + run.busy_without_advice) / run.arrivals * 100:.2f} %"
                f"  limit {statistics.mean(run.limits):.1f} (min {min(run.limits)})"
            )


def _served(run: Run, tool: Tool, at: float) -> bool:
    """Whether the calls answered ok in the half-second from ``at`` are 0.9x what the tool can
    serve of those arriving in it."""
    arrived = sum(1 for t in run.arrived if at <= t < at + 0.5)
    ok = sum(1 for t in run.ok_times if at <= t < at + 0.5)
    return ok >= 0.9 * min(arrived, 0.5 * tool.pool / tool.service)


def outage(seeds: list[int]) -> None:
    for seed, load in ((seed, load) for load in (1.0, 2.0) for seed in seeds):
        for name in ("auto", "auto-unnamed"):
            tool = Tool(4, down=(5.0, 15.0))
            run = simulate(tool, policy=name, load=load, seconds=20.0, seed=seed)
            reached = [t for t in run.tool_calls if 5.0 <= t < 15.0]
            per_second = [sum(1 for t in reached if s <= t < s + 1) for s in range(5, 15)]
            # Goodput back: the first half-second from 15 s on (in steps of 0.25 s) whose calls
            # answered ok are 0.9x what the tool can serve of those arriving in it.
            back = next((s / 4 for s in range(20) if _served(run, tool, 15 + s / 4)), math.inf)
            print(
                f"outage 10 s at {load:.1f}x, seed {seed}, {name:12s} calls reaching the tool"
                f" per second during it: min {min(per_second)}; goodput at 0.9x of before"
                f" {back:.2f} s after recovery; limit min {min(run.limits)}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="1-3")
    parser.add_argument("--pool", type=int, default=4, help="the fail-fast pool's connections")
    parser.add_argument(
        "--queuing-pool", type=int, default=8, help="the load-independent errors' pool"
    )
    parser.add_argument("--only", choices=("failfast", "independent", "outage"))
    args = parser.parse_args()
    seeds = _seeds(args.seeds)
    if args.only in (None, "failfast"):
        fail_fast(seeds, args.pool)
    if args.only in (None, "independent"):
        independent(seeds, args.queuing_pool)
    if args.only in (None, "outage"):
        outage(seeds)


class ShiftingTool:
    """Workers that go ``phases`` (workers, seconds); calls beyond the workers wait inside the
    tool, in order, and each call waiting slows every service by ``1 / contention``."""

    def __init__(self, phases: list[tuple[int, float]], mean: float, sigma: float) -> None:
        self.phases = phases
        self.mu = math.log(mean) - sigma**2 / 2
        self.sigma = sigma
        self.busy = 0
        self.waiting: list[trio.Event] = []
        self.contention = 100.0

    def workers(self, now: float) -> int:
        start = 0.0
        for workers, seconds in self.phases:
            if now < start + seconds:
                return workers
            start += seconds
        return self.phases[-1][0]

    def wake(self) -> None:
        while self.waiting and self.busy < self.workers(trio.current_time()):
            self.busy += 1
            self.waiting.pop(0).set()

    async def call(self, rng: random.Random) -> None:
        if self.busy < self.workers(trio.current_time()):
            self.busy += 1
        else:
            event = trio.Event()
            self.waiting.append(event)
            try:
                await event.wait()
            except BaseException:
                if event in self.waiting:
                    self.waiting.remove(event)
                else:
                    self.busy -= 1
                    self.wake()
                raise
        try:
            slow = 1 + len(self.waiting) / self.contention
            await trio.sleep(rng.lognormvariate(self.mu, self.sigma) * slow)
        finally:
            self.busy -= 1
            self.wake()


def simulate_shifting(
    phases: list[tuple[int, float]],
    *,
    policy: str,
    load: float = 1.5,
    mean: float = 0.02,
    sigma: float = 0.7,
    seed: int = 1,
    slo: float = 0.25,
    settle: float = 3.0,
    queue_timeout: float | None = None,
) -> tuple[list[float], list[float | None], list[tuple[float, int]]]:
    """The real guard in front of a ``ShiftingTool``: goodput within ``slo`` per phase (from
    ``settle`` s after its start, over its capacity), the seconds until the limit came within 2x
    of the true count after each change, and the limit over time."""
    rng = random.Random(seed)
    tool = ShiftingTool(phases, mean, sigma)
    good: list[float] = []
    limits: list[tuple[float, int]] = []
    end = sum(s for _, s in phases)

    async def main() -> None:
        waits = slo if queue_timeout is None else queue_timeout
        auto = ConcurrencyGuard(limit=GradientLimit(), queue_timeout=waits, clock=trio.current_time)
        # The oracle: a fixed guard of the true count in each phase (its own default queue).
        fixed = {
            workers: ConcurrencyGuard(workers, queue_timeout=waits, clock=trio.current_time)
            for workers, _ in phases
        }

        def guard_now() -> ConcurrencyGuard:
            if policy == "auto":
                return auto
            return fixed[tool.workers(trio.current_time())]

        async def one(arrival: float) -> None:
            try:
                async with guard_now().slot():
                    await tool.call(rng)
            except ServerBusy:
                return
            if trio.current_time() - arrival <= slo:
                good.append(trio.current_time())

        async def watch() -> None:
            workers = tool.workers(0.0)
            while True:
                limits.append((trio.current_time(), guard_now().limit))
                if tool.workers(trio.current_time()) != workers:
                    workers = tool.workers(trio.current_time())
                    tool.wake()
                await trio.sleep(0.01)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            now = 0.0
            while True:
                now += rng.expovariate(load * tool.workers(now) / mean)
                if now >= end:
                    break
                await trio.sleep_until(now)
                nursery.start_soon(one, now)
            await trio.sleep(2.0)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=_seeded(seed))
    goodput, within = [], []
    start = 0.0
    for workers, seconds in phases:
        lo, hi = start + settle, start + seconds
        goodput.append(sum(lo <= t < hi for t in good) / (workers / mean * (hi - lo)))
        within.append(
            next(
                (
                    t - start
                    for t, lim in limits
                    if start <= t < hi and 0.5 * workers <= lim <= 2 * workers
                ),
                None,
            )
        )
        start = hi
    return goodput, within, limits
