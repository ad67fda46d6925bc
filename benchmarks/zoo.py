"""The tool zoo (issue 41, docs/zoo.md): nine tool models at several multiples of their capacity,
under no guard, the oracle's fixed limit, fixed 10 and ``auto``, plus an outage, a capacity drop
and a cold burst; many seeds, in virtual time.

    python benchmarks/zoo.py --seeds 1-3                      # everything, three seeds
    python benchmarks/zoo.py --models fail_fast --loads 2,3 --no-special
    python benchmarks/zoo.py --seeds 1 --json zoo.json

The scenario is ``fusion-guard demo --scenario zoo``'s (``fusion_guard.demo._zoo``: the models,
the arrivals, the policies, the figures; ``_zoo_report``: the table and the targets). Prints each
seed's table and the targets of issue 41, then how many seeds met each; exits 1 when a target
was missed in any seed.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections import defaultdict
from pathlib import Path

from fusion_guard.demo._report import format_targets
from fusion_guard.demo._virtual_time import run_in_virtual_time
from fusion_guard.demo._zoo import DEFAULT_LOADS, ZooResult, ZooScenario, run_zoo
from fusion_guard.demo._zoo_models import MODELS
from fusion_guard.demo._zoo_report import check_zoo_targets, format_zoo, write_zoo_json
from script_args import add_json_output


def _seeds(text: str) -> range:
    first, _, last = text.partition("-")
    return range(int(first), int(last or first) + 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=_seeds, default=_seeds("1"), help="e.g. 1-3 (default 1)")
    parser.add_argument(
        "--models",
        type=lambda text: tuple(text.split(",")),
        default=tuple(m.name for m in MODELS),
        help=f"comma-separated, of {','.join(m.name for m in MODELS)} (default: all)",
    )
    parser.add_argument(
        "--loads",
        type=lambda text: tuple(float(x) for x in text.split(",")),
        default=DEFAULT_LOADS,
        help="x capacity (default 0.5,0.8,1.5,4; the fail-fast pool also at 2 and 3)",
    )
    parser.add_argument(
        "--no-special", action="store_true", help="skip the outage, drop, errors and burst cells"
    )
    parser.add_argument("--quiet", action="store_true", help="the targets only, no tables")
    add_json_output(parser, "the figures and targets of every seed")
    args = parser.parse_args()
    logging.getLogger("fusion_guard").setLevel(logging.CRITICAL)  # thousands of errors
    results: list[ZooResult] = []
    for seed in args.seeds:
        scenario = ZooScenario(
            models=args.models, loads=args.loads, special=not args.no_special, seed=seed
        )
        result = run_in_virtual_time(functools.partial(run_zoo, scenario))
        results.append(result)
        if not args.quiet:
            print(format_zoo(result), end="\n\n")
    met: dict[str, list[bool]] = defaultdict(list)
    targets = [t for r in results for t in check_zoo_targets(r)]
    for target in targets:
        met[target.name.split(": ", 1)[1]].append(target.met)
    print(format_targets(targets, "max_active=auto", "docs/zoo.md, issue 41"))
    print(f"\nacross {len(results)} seed(s):")
    for name, flags in met.items():
        print(f"  {sum(flags)}/{len(flags)}  {name}")
    if args.json:
        args.json.close()
        write_zoo_json(results, Path(args.json.name))
    return 0 if all(t.met for t in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
