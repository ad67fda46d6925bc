"""Trace one load level of the one-minute demo: the guard's state every 20 ms, and what it cost.

The figures docs/adaptive.md and docs/adaptive-tried.md draw from "traces of single levels"
come from here::

    python benchmarks/level_trace.py --load 1.5 --seed 2                 # max_active="auto"
    python benchmarks/level_trace.py --load 1.5 --seed 2 --max-active 2  # the true count
    python benchmarks/level_trace.py --load 1.5 --seed 2 --json trace.json

One level as ``fusion-guard demo --policies fusion_guard --loads L --seed N`` runs it (a new
guard, a half-second warm-up at 0.5x, the overload window, recovery at 0.5x; about 10 s), with
a sampler beside it reading the guard's public state: the limit in force, calls running, calls
queued and, under an adaptive limit, its parallelism estimate and uncrowded latency. Printed: the
level's figures as the demo prints them, then, over the overload window, how often a worker of
the tool sat idle, how often the limit was 1, how often the queue was empty while a worker was
idle, the calls answered beyond the SLO in its first second and after, the level's refusals by
the rule that made them, and the samples every half second. Timing comes from the event loop,
so a run varies as the demo's does.
Not collected by pytest (no ``test_`` prefix); ``test_level_trace.py`` runs a short level.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

import anyio
from prometheus_client import CollectorRegistry

from fusion_guard import ConcurrencyGuard, Guard
from fusion_guard.demo._loadgen import CallRecord
from fusion_guard.demo._policies import TOOL_NAME
from fusion_guard.demo._scenario import LevelResult, Scenario, run_load
from script_args import add_json_output, max_active_arg

SAMPLE_EVERY = 0.02


@dataclass(frozen=True)
class Sample:
    t: float
    """Seconds since the level began (the warm-up's start)."""
    limit: int
    active: int
    queued: int
    parallelism: float | None
    baseline_ms: float | None


@dataclass(frozen=True)
class Sheds:
    """The level's refusals by the rule that made them (the guard's statistics)."""

    queue_full: int
    """At ``max_queue`` (``max_queue``: the queue in force at the level's end)."""
    standing: int
    """By the standing-queue limit, under overload."""
    predicted: int
    """At arrival, predicted to miss ``queue_timeout``."""
    late: int
    """After waiting, judged late."""
    max_queue: int

    @property
    def total(self) -> int:
        return self.queue_full + self.standing + self.predicted + self.late

    @classmethod
    def of(cls, concurrency: ConcurrencyGuard) -> Sheds:
        stats = concurrency.statistics()
        return cls(
            queue_full=stats.shed_queue_full - stats.shed_standing,
            standing=stats.shed_standing,
            predicted=stats.shed_predicted,
            late=stats.shed_queue_timeout - stats.shed_predicted,
            max_queue=stats.max_queue,
        )


@dataclass(frozen=True)
class Trace:
    level: LevelResult
    samples: list[Sample]
    overload: tuple[float, float]
    """The overload window, in the samples' seconds."""
    workers: int
    slo_s: float
    beyond_slo_first_second: int
    beyond_slo_after: int
    ok_in_overload: int
    sheds: Sheds

    def during_overload(self) -> list[Sample]:
        start, end = self.overload
        return [s for s in self.samples if start <= s.t < end]

    def idle_worker_share(self) -> float:
        """Of the tool's worker-time in the overload window, the share with no call to serve."""
        inside = self.during_overload()
        idle = sum(max(0, self.workers - s.active) for s in inside)
        return idle / (self.workers * len(inside)) if inside else math.nan

    def limit_one_share(self) -> float:
        """The share of the overload window the limit was 1."""
        return self._share(lambda s: s.limit == 1)

    def empty_and_idle_share(self) -> float:
        """The share of the overload window with nobody queued and a worker idle."""
        return self._share(lambda s: s.queued == 0 and s.active < self.workers)

    def _share(self, holds: Callable[[Sample], bool]) -> float:
        inside = self.during_overload()
        return sum(1 for s in inside if holds(s)) / len(inside) if inside else math.nan


def _sample(t: float, concurrency: ConcurrencyGuard) -> Sample:
    adaptive = concurrency.adaptive_limit
    parallelism = getattr(adaptive, "parallelism", None)
    baseline = getattr(adaptive, "baseline", None)
    return Sample(
        t=round(t, 3),
        limit=concurrency.limit,
        active=concurrency.active,
        queued=concurrency.queued,
        parallelism=None if parallelism is None else round(parallelism, 2),
        baseline_ms=None if baseline is None or math.isnan(baseline) else round(baseline * 1e3, 1),
    )


async def trace_level(load: float, scenario: Scenario, max_active: int | Literal["auto"]) -> Trace:
    guards: list[Guard] = []
    built = anyio.Event()

    def factory(workers: int, lifo: bool) -> Guard:
        guard = Guard(max_active=max_active, lifo=lifo, registry=CollectorRegistry())
        guards.append(guard)
        built.set()
        return guard

    samples: list[Sample] = []
    records: dict[str, list[CallRecord]] = {}
    began = anyio.current_time()

    async def sample() -> None:
        await built.wait()  # the policy builds its guard as the level starts
        guard = guards[0]
        while True:
            concurrency = guard.concurrency(TOOL_NAME)  # None until the first call
            if concurrency is not None:
                samples.append(_sample(anyio.current_time() - began, concurrency))
            await anyio.sleep(SAMPLE_EVERY)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sample)
        (level,) = await run_load(load, scenario, factory, ["fusion_guard"], records_out=records)
        tg.cancel_scope.cancel()
    calls = records["fusion_guard"]
    concurrency = guards[0].concurrency(TOOL_NAME)
    assert concurrency is not None  # the level made calls
    onset = began + scenario.warmup_s  # the level's arrivals are laid out from its start
    end = onset + scenario.duration_s
    ok_in_window = [r for r in calls if r.outcome == "ok" and onset <= r.intended < end]
    slow = [r for r in calls if r.outcome == "ok" and r.latency > scenario.slo_s]
    return Trace(
        level=level,
        samples=samples,
        overload=(round(onset - began, 3), round(end - began, 3)),
        workers=scenario.model.workers,
        slo_s=scenario.slo_s,
        beyond_slo_first_second=sum(1 for r in slow if onset - 0.5 <= r.intended < onset + 1.0),
        beyond_slo_after=sum(1 for r in slow if onset + 1.0 <= r.intended < end),
        ok_in_overload=len(ok_in_window),
        sheds=Sheds.of(concurrency),
    )


def report(trace: Trace) -> str:
    level, sheds = trace.level, trace.sheds
    lines = [
        f"load {level.load}x: goodput {level.goodput:.2f}, within the SLO"
        f" {level.goodput_slo:.2f}, p99 {level.p99_ms or math.nan:.0f} ms,"
        f" shed {level.shed_rate * 100:.1f} %,"
        f" recovery {level.recovery_s} s",
        f"overload window {trace.overload[0]:.2f}-{trace.overload[1]:.2f} s:"
        f" workers idle {trace.idle_worker_share() * 100:.1f} % of the time,"
        f" limit 1 for {trace.limit_one_share() * 100:.1f} %,"
        f" queue empty with a worker idle {trace.empty_and_idle_share() * 100:.1f} %",
        f"answered OK beyond the {trace.slo_s * 1000:.0f} ms SLO: {trace.beyond_slo_first_second}"
        f" from half a second before the overload to its first second,"
        f" {trace.beyond_slo_after} after (of {trace.ok_in_overload} OK in the window)",
        f"shed: {sheds.queue_full} at a full queue (max_queue {sheds.max_queue} at the end),"
        f" {sheds.standing} by the standing-queue limit, {sheds.predicted} predicted to time out"
        f" at arrival, {sheds.late} judged late after waiting",
        "   t s  limit  active  queued  parallelism  baseline ms",
    ]
    step = round(0.5 / SAMPLE_EVERY)
    for s in trace.samples[::step]:
        lines.append(
            f"{s.t:6.2f}  {s.limit:5d}  {s.active:6d}  {s.queued:6d}"
            f"  {'-' if s.parallelism is None else s.parallelism:>11}"
            f"  {'-' if s.baseline_ms is None else s.baseline_ms:>11}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=float, default=1.5, help="times capacity (default 1.5)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-active", type=max_active_arg, default="auto")
    parser.add_argument(
        "--duration", type=float, default=Scenario().duration_s, help="overload window, s"
    )
    add_json_output(parser, "the level and every sample")
    args = parser.parse_args(argv)
    if not (args.load > 0 and math.isfinite(args.load)):
        parser.error(f"--load must be a positive number, got {args.load}")
    if not (args.duration > 0 and math.isfinite(args.duration)):
        parser.error(f"--duration must be a positive number of seconds, got {args.duration}")
    scenario = Scenario(seed=args.seed, duration_s=args.duration)
    # The level's sheds are the point: keep their sampled warnings off the terminal, as the
    # demo does, unless logging was configured.
    if not logging.getLogger().handlers:
        logging.getLogger("fusion_guard").setLevel(logging.ERROR)
    trace = anyio.run(trace_level, args.load, scenario, args.max_active)
    print(report(trace))
    if args.json:
        with args.json as out:
            level = trace.level.to_json()
            samples = [asdict(s) for s in trace.samples]
            json.dump(
                {
                    "level": level,
                    "overload": trace.overload,
                    "sheds": asdict(trace.sheds),
                    "samples": samples,
                },
                out,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
