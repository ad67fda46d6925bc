"""Many seeds of the demos in virtual time: a seed of the one-minute demo in about two seconds.

::

    python benchmarks/virtual_demo.py --seeds 1-30                    # max_active="auto"
    python benchmarks/virtual_demo.py --seeds 1-30 --max-active 2     # the true count
    python benchmarks/virtual_demo.py --scenario shifting --seeds 1-30
    python benchmarks/virtual_demo.py --seeds 1-5 --json figures.json

The tool, the load generator and the guard run as ``fusion-guard demo --policies fusion_guard``
(or ``--scenario shifting``) runs them, but on trio with a mock clock that jumps to the next
timer whenever every task waits: time passes in sleeps only (the tool's service, the spacing of
arrivals), never in the code between them. The figures are then the algorithm's alone, without
the event loop's lag, which costs a real run on a shared two-core machine about a point within
the SLO at 1.5x (a few before the demo tools' timing fix of 2026-12-05); and the same command
gives the same figures (each seed also seeds trio's shuffling of tasks that are ready together).
So it compares variants over tens of seeds in a minute, where real runs give a handful of seeds
an hour, each differing from its own re-run. It does not replace the real demo: the figures the
docs quote for ``make demo`` come from real runs.

The guard reads ``time.monotonic`` unless given a clock, and the default is taken when its
module is imported, so this script points ``time.monotonic`` at trio's clock before it imports
fusion_guard (outside a trio run it is the real clock still).

Printed: a line per seed (pass or fail, the figures the targets judge, the 0.8x level's sheds by
the rule that made them), then how many seeds met every target and which targets failed how
often. Not collected by pytest (no ``test_`` prefix); ``test_virtual_demo.py`` runs it short.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import trio
from trio.testing import MockClock

from script_args import add_json_output, max_active_arg

_real_monotonic = time.monotonic


def _monotonic() -> float:
    """trio's clock inside a trio run (virtual under MockClock), the real one elsewhere."""
    try:
        return trio.current_time()
    except RuntimeError:
        return _real_monotonic()


@dataclass
class SeedFigures:
    seed: int
    met: bool
    failed: list[str]
    figures: dict[str, Any]
    """The run's figures (the demo's ``--json`` shape: levels, or phases)."""
    line: str


def _seeds(text: str) -> range:
    first, _, last = text.partition("-")
    try:
        seeds = range(int(first), int(last or first) + 1)
    except ValueError:
        seeds = range(0)
    if not seeds or seeds.start < 0:
        raise argparse.ArgumentTypeError(f"expected N or N-M (0 <= N <= M), got {text!r}")
    return seeds


def _loads(text: str) -> tuple[float, ...]:
    try:
        loads = tuple(float(part) for part in text.split(","))
    except ValueError:
        loads = ()
    if not loads or not all(0 < load < math.inf for load in loads):
        raise argparse.ArgumentTypeError(
            f"expected positive numbers separated by commas, got {text!r}"
        )
    return loads


def _virtual_run(seed: int, fn: Callable[[], Any]) -> Any:
    # trio runs tasks that are ready together in a shuffled order; seeding the shuffle makes a
    # run repeat exactly. It lives in trio's private core: without it, runs vary a little.
    shuffle = getattr(getattr(trio, "_core", None), "_run", None)
    if shuffle is not None and hasattr(shuffle, "_r"):
        shuffle._r.seed(seed)
    return trio.run(fn, clock=MockClock(autojump_threshold=0))


def run_overload(
    seed: int, max_active: int | Literal["auto"], loads: Sequence[float]
) -> SeedFigures:
    from prometheus_client import CollectorRegistry

    from fusion_guard import Guard
    from fusion_guard.demo._policies import TOOL_NAME, default_guard_factory
    from fusion_guard.demo._report import check_targets
    from fusion_guard.demo._run import run_demo
    from fusion_guard.demo._scenario import Scenario
    from level_trace import Sheds  # imports fusion_guard: only once the clock is set

    scenario = Scenario(seed=seed)
    guards: list[Guard] = []
    made = default_guard_factory(CollectorRegistry(), max_active)

    def factory(workers: int, lifo: bool) -> Guard:
        guard = made(workers, lifo)
        assert isinstance(guard, Guard)
        guards.append(guard)
        return guard

    async def demo() -> Any:
        return await run_demo(scenario, factory, loads=loads, policies=("fusion_guard",))

    result = _virtual_run(seed, demo)
    targets = check_targets(result)
    levels = {r.load: r for r in result.results}
    sheds: dict[float, dict[str, int]] = {}
    for load, guard in zip(loads, guards, strict=True):
        slots = guard.concurrency(TOOL_NAME)
        assert slots is not None
        by_rule = Sheds.of(slots)
        sheds[load] = {
            "queue_full": by_rule.queue_full,
            "standing": by_rule.standing,
            "predicted": by_rule.predicted,
            "late": by_rule.late,
        }
    over = [r for r in result.results if r.load >= 1.5]
    parts = [f"seed {seed:>2}", "PASS" if all(t.met for t in targets) else "FAIL"]
    if over:
        parts.append(f"within the SLO {min(r.goodput_slo for r in over):.2f}")
        parts.append(f"within the timeout {min(r.goodput for r in over):.2f} (worst load)")
    if 0.8 in levels:
        shed = sheds[0.8]
        parts.append(
            f"0.8x shed {levels[0.8].shed_rate * 100:.1f} % ({shed['standing']} standing,"
            f" {shed['queue_full']} full)"
        )
    if 4.0 in levels and levels[4.0].p99_ms is not None:
        parts.append(f"p99 at 4x {levels[4.0].p99_ms:.0f} ms")
    figures = {
        "results": [r.to_json() for r in result.results],
        "sheds": {str(load): counts for load, counts in sheds.items()},
        "targets": [{"name": t.name, "met": t.met, "observed": t.observed} for t in targets],
    }
    failed = [t.name for t in targets if not t.met]
    return SeedFigures(seed, not failed, failed, figures, ", ".join(parts))


def run_shifting(seed: int, phase_s: float | None) -> SeedFigures:
    from fusion_guard.demo._shifting import ShiftingScenario
    from fusion_guard.demo._shifting import run_shifting as shifting
    from fusion_guard.demo._shifting_report import check_shifting_targets, oracle_shares

    scenario = ShiftingScenario(seed=seed)
    if phase_s is not None:
        scenario = ShiftingScenario(seed=seed, phase_s=phase_s, settle_s=phase_s / 2)

    async def demo() -> Any:
        return await shifting(scenario)

    result = _virtual_run(seed, demo)
    targets = check_shifting_targets(result)
    shares = oracle_shares(result)
    reached = [result.phase("auto", i).reached_s for i in range(len(scenario.workers))]
    failed = [t.name for t in targets if not t.met]
    line = (
        f"seed {seed:>2} {'PASS' if not failed else 'FAIL'}, auto / oracle within the SLO by"
        f" phase {' '.join(f'{s:.2f}' for s in shares)}, within 2x after"
        f" {' '.join('never' if r is None else f'{r:.2f}' for r in reached)} s"
    )
    figures = {
        "phases": [
            {k: v for k, v in phase.items() if k != "limits"}
            for phase in result.to_json()["phases"]
        ],
        "worst_share": min(shares),
        "targets": [{"name": t.name, "met": t.met, "observed": t.observed} for t in targets],
    }
    return SeedFigures(seed, not failed, failed, figures, line)


def summary(runs: Sequence[SeedFigures], scenario: str) -> str:
    met = sum(run.met for run in runs)
    lines = [f"{met} of {len(runs)} seeds met every target"]
    failures = Counter(name for run in runs for name in run.failed)
    lines += [f"  {count:>3} x {name}" for name, count in failures.most_common()]
    if scenario == "shifting":
        worst = [run.figures["worst_share"] for run in runs]
        lines.append(
            f"worst phase, auto / oracle: mean {statistics.fmean(worst):.3f},"
            f" lowest {min(worst):.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=("overload", "shifting"), default="overload")
    parser.add_argument("--seeds", type=_seeds, default=range(1, 6), help="N or N-M (default 1-5)")
    parser.add_argument(
        "--max-active", type=max_active_arg, default="auto", help="overload: 'auto' or a number"
    )
    parser.add_argument(
        "--loads", type=_loads, default=None, help="overload: e.g. 0.8,1.5 (default: the demo's)"
    )
    parser.add_argument(
        "--phase", type=float, default=None, help="shifting: seconds per phase (default 6)"
    )
    add_json_output(parser, "every seed's figures")
    args = parser.parse_args(argv)
    if args.phase is not None and not (0 < args.phase < math.inf):
        parser.error(f"--phase must be a positive number of seconds, got {args.phase}")
    # Sheds are the point of an overload: keep their sampled warnings off the terminal, as the
    # demo does, unless logging was configured.
    if not logging.getLogger().handlers:
        logging.getLogger("fusion_guard").setLevel(logging.ERROR)
    if "fusion_guard" in sys.modules:
        # Already imported, the guard took the real clock: only a new process can run this.
        parser.error("fusion_guard was imported before this script could set its clock")
    time.monotonic = _monotonic  # before fusion_guard takes it as its default clock
    from fusion_guard.demo._scenario import DEFAULT_LOADS

    loads = DEFAULT_LOADS if args.loads is None else args.loads
    runs: list[SeedFigures] = []
    for seed in args.seeds:
        if args.scenario == "shifting":
            run = run_shifting(seed, args.phase)
        else:
            run = run_overload(seed, args.max_active, loads)
        print(run.line, flush=True)
        runs.append(run)
    print(summary(runs, args.scenario))
    if args.json:
        with args.json as out:
            json.dump({str(run.seed): run.figures for run in runs}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
