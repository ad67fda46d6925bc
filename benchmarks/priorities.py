"""Interactive and background agents on one tool, priority-blind vs priority-aware, many seeds
in virtual time.

    python benchmarks/priorities.py --seeds 1-3                 # 3x capacity, 20 % interactive
    python benchmarks/priorities.py --seeds 1-3 --load 2 --interactive 0.3
    python benchmarks/priorities.py --seeds 1-3 --priority-share 0.5  # slots kept from background
    python benchmarks/priorities.py --seeds 1-3 --max-active 10  # fixed, 2.5x the tool's workers
    python benchmarks/priorities.py --seeds 3 --service-seed 103  # same arrivals, other draws
    python benchmarks/priorities.py --seeds 1-4 --workers 8  # a tool of 8 workers

The scenario is ``fusion-guard demo --scenario priorities``'s (``fusion_guard.demo._priorities``:
the tool, the clients, the arrivals, the figures), one load at a time, on trio with a mock clock
(each seed also seeds trio's shuffling of tasks that are ready together, so the same command
gives the same figures). The targets (issue 42) are checked for the aware guard as the demo
checks them.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
from dataclasses import asdict

import trio
from trio.testing import MockClock

from fusion_guard.demo._priorities import PrioritiesResult, PrioritiesScenario, run_priorities_load
from fusion_guard.demo._priorities_report import missed_targets
from fusion_guard.demo._tool import ToolModel


def _run(scenario: PrioritiesScenario, load: float) -> PrioritiesResult:
    shuffle = getattr(getattr(trio, "_core", None), "_run", None)
    if shuffle is not None and hasattr(shuffle, "_r"):
        shuffle._r.seed(scenario.seed)
    result = trio.run(
        functools.partial(run_priorities_load, scenario, load),
        clock=MockClock(autojump_threshold=0),
    )
    return PrioritiesResult(scenario, (result,))


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
        result = _run(scenario, args.load)
        figures = {mode: asdict(f) for mode, f in result.loads[0].modes.items()}
        missed = missed_targets(result)
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
