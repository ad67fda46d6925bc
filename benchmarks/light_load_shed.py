"""How much a guard sheds when the tool is *not* overloaded, and what it does when it is: a
tool model behind a guard, Poisson arrivals at a multiple of its capacity, in virtual time.

::

    python benchmarks/light_load_shed.py                          # every model, 0.5x 0.8x 1.5x 4x
    python benchmarks/light_load_shed.py --models heavy --loads 0.8 --policies issue
    python benchmarks/light_load_shed.py --seeds 1-3 --seconds 60 --json figures.json

Per model, load and policy: the share of calls refused (``shed``), split by rule (``predicted``
at arrival or in the queue, ``expired`` after waiting ``queue_timeout``, ``full`` / ``standing``),
and the same run without predictive shedding (``shed_off``: what the queue would really time out
or overflow); at overload, the share of refusals answered early (before half the timeout) and the
goodput against the tool's capacity. The policies: ``issue`` is issue 41's
``ConcurrencyGuard(max_active=2, max_queue=16, queue_timeout=0.15)`` (the slots at the true worker
count); ``fixed`` is ``Guard(max_active=<workers>)``, ``auto`` the default ``Guard()``.

The models (calls beyond the workers wait inside the tool, FIFO):

- ``heavy``: log-normal sigma 1.0, 20 ms mean, 2 workers (the demo's tool, without contention);
- ``heavy12``: log-normal sigma 1.2, 20 ms mean, 2 workers;
- ``pool``: a database pool of 4, log-normal sigma 0.5, 10 ms mean, each call piled up beyond
  the pool slowing every service 1 %;
- ``cache``: 90 % of calls 1-2 ms, 10 % 100-300 ms (uniform), 4 workers;
- ``argdep``: 80 % cheap lookups (log-normal 5 ms, sigma 0.3), 20 % queries (80 ms, sigma 0.5),
  4 workers;
- ``slow``: 1-5 s (uniform), 2 workers, as an LLM-backed tool;
- ``threads``: a thread pool of 4, 10 ms of CPU (gamma, shape 8) per call.

Runs on asyncio in virtual time (``fusion_guard.demo._virtual_time``): time passes only in the
tool's sleeps and the gaps between arrivals, so the figures are the guard's alone, and repeat.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio

from fusion_guard import ConcurrencyGuard, Guard, ServerBusy
from fusion_guard.demo._virtual_time import run_in_virtual_time

Draw = Callable[[random.Random], float]


def lognormal(mean: float, sigma: float) -> Draw:
    mu = math.log(mean) - sigma * sigma / 2
    return lambda rng: rng.lognormvariate(mu, sigma)


def mixture(*parts: tuple[float, Draw]) -> Draw:
    def draw(rng: random.Random) -> float:
        pick = rng.random()
        for share, part in parts:
            if pick < share:
                return part(rng)
            pick -= share
        return parts[-1][1](rng)

    return draw


def uniform(low: float, high: float) -> Draw:
    return lambda rng: rng.uniform(low, high)


def gamma(mean: float, shape: float) -> Draw:
    return lambda rng: rng.gammavariate(shape, mean / shape)


@dataclass(frozen=True)
class Model:
    name: str
    workers: int
    draw: Draw
    mean: float
    contention: float = math.inf  # each call piled up beyond the workers: 1/contention slower

    @property
    def capacity(self) -> float:
        return self.workers / self.mean


MODELS = {
    model.name: model
    for model in (
        Model("heavy", 2, lognormal(0.020, 1.0), 0.020),
        Model("heavy12", 2, lognormal(0.020, 1.2), 0.020),
        Model("pool", 4, lognormal(0.010, 0.5), 0.010, contention=100.0),
        Model(
            "cache",
            4,
            mixture((0.9, uniform(0.001, 0.002)), (0.1, uniform(0.1, 0.3))),
            0.9 * 0.0015 + 0.1 * 0.2,
        ),
        Model(
            "argdep",
            4,
            mixture((0.8, lognormal(0.005, 0.3)), (0.2, lognormal(0.080, 0.5))),
            0.8 * 0.005 + 0.2 * 0.080,
        ),
        Model("slow", 2, uniform(1.0, 5.0), 3.0),
        Model("threads", 4, gamma(0.010, 8.0), 0.010),
    )
}


class Tool:
    """``workers`` servers behind a FIFO queue inside the tool."""

    def __init__(self, model: Model, rng: random.Random) -> None:
        self.model = model
        self.rng = rng
        self.pool = anyio.Semaphore(model.workers)
        self.inside = 0

    async def __call__(self) -> str:
        self.inside += 1
        try:
            async with self.pool:
                piled = max(0, self.inside - self.model.workers)
                await anyio.sleep(self.model.draw(self.rng) * (1.0 + piled / self.model.contention))
        finally:
            self.inside -= 1
        return "ok"


@dataclass
class Cell:
    model: str
    load: float
    policy: str
    seed: int
    calls: int = 0
    ok: int = 0
    rules: Counter[str] = field(default_factory=Counter)
    early: int = 0  # refusals answered before half the queue timeout
    goodput: float = 0.0  # calls served per second over the tool's capacity
    p99: float = 0.0  # of the served calls' latency

    @property
    def shed(self) -> float:
        return sum(self.rules.values()) / max(self.calls, 1)


def _rule(reason: str | None, text: str) -> str:
    """The rule that refused a call, from its SERVER_BUSY envelope."""
    if '"predicted"' in text or "predicted" in text.split("reason")[-1]:
        return "predicted"
    if reason == "queue_timeout":
        return "expired"
    if "standing" in text:
        return "standing"
    return "full"


def _make(policy: str, model: Model, predictive: bool) -> Callable[[Tool], Any]:
    """A function calling the tool through the policy's guard: None when served, else the
    rule that refused it."""
    if policy == "issue":
        guard = ConcurrencyGuard(
            max_active=model.workers, max_queue=16, queue_timeout=0.15,
            predictive=predictive, clock=anyio.current_time,
        )  # fmt: skip

        async def through_slots(tool: Tool) -> str | None:
            try:
                async with guard.slot():
                    await tool()
            except ServerBusy as busy:
                return _rule(busy.reason, busy.response.text)
            return None

        return through_slots
    limits: dict[str, Any] = {} if policy == "auto" else {"max_active": model.workers}
    whole = Guard(clock=anyio.current_time, metrics=False, **limits)
    if not predictive:  # a harness's reach into the tool's slots: no predictive shedding
        slots = whole._gate("tool").admission
        discipline = slots._core.discipline  # type: ignore[union-attr]
        discipline.predictive = discipline.rejudging = False

    async def through_guard(tool: Tool) -> str | None:
        response = await whole.call("tool", tool)
        if not response.is_error:
            return None
        if response.code != "SERVER_BUSY":
            return "error"
        facts = response.facts or {}
        details = facts.get("details", facts)
        reason = details.get("reason") if isinstance(details, dict) else None
        return _rule(reason, response.text)

    return through_guard


async def _run(model: Model, load: float, policy: str, seed: int, seconds: float,
               predictive: bool) -> Cell:  # fmt: skip
    rng = random.Random(seed)
    tool = Tool(model, random.Random(seed + 1_000_003))
    call = _make(policy, model, predictive)
    cell = Cell(model.name, load, policy, seed)
    timeout = 0.15 if policy == "issue" else 5.0
    latencies: list[float] = []
    rate = load * model.capacity
    start = anyio.current_time()

    async def one() -> None:
        begun = anyio.current_time()
        rule = await call(tool)
        took = anyio.current_time() - begun
        if rule is None:
            cell.ok += 1
            latencies.append(took)
        else:
            cell.rules[rule] += 1
            cell.early += took < timeout / 2

    async with anyio.create_task_group() as tg:
        at = start
        while True:
            at += rng.expovariate(rate)
            if at - start >= seconds:
                break
            await anyio.sleep_until(at)
            cell.calls += 1
            tg.start_soon(one)
    cell.goodput = cell.ok / seconds / model.capacity
    if latencies:
        latencies.sort()
        cell.p99 = latencies[int(0.99 * (len(latencies) - 1))]
    return cell


def measure(model: str, load: float, policy: str, seed: int, seconds: float,
            predictive: bool = True) -> Cell:  # fmt: skip
    """One cell, run in virtual time."""

    async def run() -> Cell:
        return await _run(MODELS[model], load, policy, seed, seconds, predictive)

    return run_in_virtual_time(run)


def _seeds(text: str) -> range:
    first, _, last = text.partition("-")
    return range(int(first), int(last or first) + 1)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    parser.add_argument("--loads", nargs="+", type=float, default=[0.5, 0.8, 1.5, 4.0])
    parser.add_argument("--policies", nargs="+", choices=["issue", "fixed", "auto"],
                        default=["issue", "fixed", "auto"])  # fmt: skip
    parser.add_argument("--seeds", type=_seeds, default=range(1, 2))
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--no-off", action="store_true", help="skip the predictive=False runs")
    parser.add_argument("--json", type=argparse.FileType("w", encoding="utf-8"))
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for name in args.models:
        seconds = args.seconds * (20.0 if name == "slow" else 1.0)  # ~ as many calls
        for policy in args.policies:
            for load in args.loads:
                sheds, offs = [], []
                for seed in args.seeds:
                    cell = measure(name, load, policy, seed, seconds)
                    off = None if args.no_off else measure(name, load, policy, seed, seconds,
                                                           predictive=False)  # fmt: skip
                    sheds.append(cell.shed)
                    if off is not None:
                        offs.append(off.shed)
                    rules = " ".join(
                        f"{k}={v / cell.calls:.2%}" for k, v in sorted(cell.rules.items())
                    )
                    refused = max(sum(cell.rules.values()), 1)
                    print(
                        f"{name:8} {policy:6} {load:4.1f}x seed {seed}: shed {cell.shed:6.2%}"
                        + ("" if off is None else f" (off {off.shed:6.2%})")
                        + f" early {cell.early / refused:4.0%} goodput {cell.goodput:.2f}"
                        f" p99 {cell.p99 * 1000:7.1f} ms  [{rules}]",
                        flush=True,
                    )
                    row = asdict(cell)
                    row["shed"] = cell.shed
                    row["shed_off"] = None if off is None else off.shed
                    rows.append(row)
                if len(sheds) > 1:
                    off_range = f" (off {min(offs):.2%}-{max(offs):.2%})" if offs else ""
                    print(
                        f"{name:8} {policy:6} {load:4.1f}x:"
                        f" shed {min(sheds):.2%}-{max(sheds):.2%}{off_range}"
                    )
    if args.json is not None:
        json.dump(rows, args.json, indent=1)


if __name__ == "__main__":
    main()
