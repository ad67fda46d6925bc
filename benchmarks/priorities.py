"""Interactive and background agents on one tool, priority-blind vs priority-aware, many seeds
in virtual time.

    python benchmarks/priorities.py --seeds 1-3                 # 3x capacity, 20 % interactive
    python benchmarks/priorities.py --seeds 1-3 --load 2 --interactive 0.3
    python benchmarks/priorities.py --seeds 1-3 --priority-share 0.5  # slots kept from background
    python benchmarks/priorities.py --seeds 1-3 --max-active 10  # fixed, 2.5x the tool's workers
    python benchmarks/priorities.py --seeds 3 --service-seed 103  # same arrivals, other draws
    python benchmarks/priorities.py --seeds 1-4 --workers 8  # a tool of 8 workers
    python benchmarks/priorities.py --seeds 10 --breakdown  # where the slowest 1 % waited

Each seed prints the aware guard, the blind one, the control (``alone``: the same interactive
arrivals, no background) and a clairvoyant bound for the aware run and the control: their
interactive calls with their own service draws, in arrival order, no background, no guard.

The scenario is ``fusion-guard demo --scenario priorities``'s (``fusion_guard.demo._priorities``:
the tool, the clients, the arrivals, the figures), one load at a time, on trio with a mock clock
(each seed also seeds trio's shuffling of tasks that are ready together, so the same command
gives the same figures). The targets (issue 42) are checked for the aware guard as the demo
checks them.
"""

from __future__ import annotations

import argparse
import functools
import heapq
import json
import logging
import sys
from dataclasses import asdict

import trio
from trio.testing import MockClock

from fusion_guard.demo._loadgen import percentile
from fusion_guard.demo._priorities import (
    INTERACTIVE,
    CallTrace,
    PrioritiesResult,
    PrioritiesScenario,
    run_priorities_load,
)
from fusion_guard.demo._priorities_report import missed_targets
from fusion_guard.demo._tool import ToolModel


def _run(
    scenario: PrioritiesScenario, load: float, trace: list[CallTrace] | None = None
) -> PrioritiesResult:
    shuffle = getattr(getattr(trio, "_core", None), "_run", None)
    if shuffle is not None and hasattr(shuffle, "_r"):
        shuffle._r.seed(scenario.seed)
    result = trio.run(
        functools.partial(run_priorities_load, scenario, load, trace=trace),
        clock=MockClock(autojump_threshold=0),
    )
    return PrioritiesResult(scenario, (result,))


def breakdown(trace: list[CallTrace], scenario: PrioritiesScenario) -> dict[str, float]:
    """Where the aware guard's slowest 1 % of interactive calls (sent in the window) spent their
    time, in ms on average: the guard's queue and the wait for a worker inside the tool, each
    split into the time every worker served an interactive call (behind interactive calls: it
    would have waited with no background at all) and the time one or more served a background
    call (behind background, started before it); their own service; and, of the queue, the
    time a worker was idle (the limit below the tool's workers)."""
    workers = scenario.model.workers
    served = [t for t in trace if t.mode == "aware"]
    start = min(t.sent for t in served) + scenario.warmup_s if served else 0.0
    end = start + scenario.duration_s
    window = [t for t in served if t.client in INTERACTIVE and start <= t.sent < end]
    if not window:
        return {}
    latencies = sorted(t.done - t.sent for t in window)
    cut = latencies[int(0.99 * (len(latencies) - 1))]
    slow = [t for t in window if t.done - t.sent >= cut]
    parts = {
        f"{where}_{what}": 0.0
        for where in ("queue", "tool")
        for what in ("behind_interactive", "behind_background", "with_a_worker_idle")
    }
    parts["service"] = 0.0
    for call in slow:
        # The workers held by each class, step by step over the call's wait.
        edges = sorted(
            (when, step, t.client in INTERACTIVE)
            for t in served
            if t is not call and t.worker < call.worker and t.done > call.sent
            for when, step in ((t.worker, 1), (t.done, -1))
        )
        busy = {True: 0, False: 0}
        at = call.sent
        for when, step, interactive in [*edges, (call.worker, 0, True)]:
            upto = min(max(when, at), call.worker)
            for begin, end, where in ((at, call.admitted, "queue"), (call.admitted, upto, "tool")):
                spell = min(end, upto) - max(begin, at)
                if spell > 0:
                    if busy[True] + busy[False] < workers:  # neither class in the way
                        parts[f"{where}_with_a_worker_idle"] += spell
                    else:
                        behind = "interactive" if busy[True] >= workers else "background"
                        parts[f"{where}_behind_{behind}"] += spell
            at = upto
            busy[interactive] += step
        parts["service"] += call.done - call.worker
    return {
        "calls": len(slow),
        "p99_ms": round(cut * 1000, 1),
        **{k: round(v / len(slow) * 1000, 1) for k, v in parts.items()},
    }


def bound(
    trace: list[CallTrace], scenario: PrioritiesScenario, mode: str = "aware"
) -> dict[str, float]:
    """The clairvoyant bound on ``mode``'s interactive p99 (over the uncontended p99): the same
    interactive calls, each with the service it really drew in that run, served in arrival order
    by the tool's workers with no background at all and nothing held back (no guard): a rule
    that neither preempts a call nor serves them out of arrival order can only add to it
    (background only takes workers from them); ``service_x``: the p99 of their services alone,
    no queueing at all. So
    ``service_x`` is the draws' luck, ``own_x - service_x`` the interactive calls' queueing
    behind each other, and the run's p99 - ``own_x`` what background (and the guard) added."""
    calls = sorted(
        (t.sent, t.done - t.worker) for t in trace if t.mode == mode and t.client in INTERACTIVE
    )
    if not calls:
        return {}
    start = calls[0][0] + scenario.warmup_s
    end = start + scenario.duration_s
    free = [calls[0][0]] * scenario.model.workers
    latencies, services = [], []
    for sent, service in calls:
        at = max(sent, heapq.heappop(free))
        heapq.heappush(free, at + service)
        if start <= sent < end:
            latencies.append(at + service - sent)
            services.append(service)
    unit = scenario.model.uncontended_p99_s
    own, alone = percentile(latencies, 0.99), percentile(services, 0.99)
    assert own is not None
    assert alone is not None
    return {"service_x": round(alone / unit, 3), "own_x": round(own / unit, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", default="1-3")
    parser.add_argument("--load", type=float, default=3.0, help="x capacity (default 3)")
    parser.add_argument("--interactive", type=float, default=0.2, help="share of the calls")
    parser.add_argument(
        "--priority-share", type=float, help="the guards' priority_share (default: theirs)"
    )
    parser.add_argument(
        "--max-active", type=int, help="the guards' fixed max_active (default: auto)"
    )
    parser.add_argument("--workers", type=int, default=4, help="the tool's (default 4)")
    parser.add_argument(
        "--service-seed", type=int, help="seeds the service times apart (default: the seed)"
    )
    parser.add_argument(
        "--breakdown", action="store_true", help="where the slowest 1 %% of interactive waited"
    )
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    first, _, last = args.seeds.partition("-")
    seeds = range(int(first), int(last or first) + 1)
    logging.getLogger("fusion_guard").setLevel(logging.ERROR)  # thousands of sheds
    out = {}
    met = 0
    for seed in seeds:
        scenario = PrioritiesScenario(
            loads=(args.load,),
            interactive=args.interactive,
            priority_share=args.priority_share,
            max_active=args.max_active,
            model=ToolModel(workers=args.workers),
            seed=seed,
            service_seed=args.service_seed,
        )
        trace: list[CallTrace] = []
        result = _run(scenario, args.load, trace)
        figures = {mode: asdict(f) for mode, f in result.loads[0].modes.items()}
        missed = missed_targets(result)
        met += not missed
        out[seed] = {**figures, "missed": missed}
        print(f"seed {seed:2d} blind {json.dumps(figures['blind'])}")
        print(f"        aware {json.dumps(figures['aware'])}")
        print(f"        alone {json.dumps(figures['alone'])}")
        print(f"        {'PASS' if not missed else 'MISS: ' + '; '.join(missed)}")
        out[seed]["bound"] = bounds = {m: bound(trace, scenario, m) for m in ("aware", "alone")}
        print(f"        clairvoyant, own draws: {json.dumps(bounds)}")
        if args.breakdown:
            out[seed]["breakdown"] = parts = breakdown(trace, scenario)
            print(f"        slowest 1 % of interactive, ms: {json.dumps(parts)}")
    print(f"{met} of {len(seeds)} seeds met every target")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(out, file, indent=1)
    return 0 if met == len(seeds) else 1


if __name__ == "__main__":
    sys.exit(main())
