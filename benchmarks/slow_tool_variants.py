"""The zoo's slow LLM-backed tool with other parameters (docs/adaptive.md, slow tools): calls of
0.5-2 s, 4 or 16 workers, and the zoo's own (8 workers, 1-5 s), at 0.5x, 0.8x, 1.5x and 4x
their capacity; per seed range, ``auto``'s goodput within the SLO over the oracle's and fixed
10's, its shed and its mean limit in force, in virtual time.

    python benchmarks/slow_tool_variants.py                    # seeds 1-3 and 4-8, every variant
    python benchmarks/slow_tool_variants.py --variants 16w --seeds 1-3
    python benchmarks/slow_tool_variants.py --variants default --seeds 1-6 --per-seed
    python benchmarks/slow_tool_variants.py --variants default --seeds 2 --bins 1.5

``--bins LOAD``: per 10 s of each seed at that load, the calls served within the SLO (by when
they ended, as the zoo counts them) under ``auto`` and fixed 10, and ``auto``'s mean slots in
force: where in the run ``auto`` loses to fixed 10.
"""

from __future__ import annotations

import argparse
import functools
import logging
from dataclasses import replace
from typing import Any

from fusion_guard.demo._virtual_time import run_in_virtual_time
from fusion_guard.demo._zoo import _simulate, run_cell
from fusion_guard.demo._zoo_models import model_named

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "0.5-2s": {"service_s": (0.5, 2.0)},
    "4w": {"workers": 4},
    "16w": {"workers": 16},
}
LOADS = (0.5, 0.8, 1.5, 4.0)


def _seeds(text: str) -> range:
    first, _, last = text.partition("-")
    return range(int(first), int(last or first) + 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--seeds", type=_seeds, action="append", help="e.g. 1-3, repeatable (default 1-3, 4-8)"
    )
    parser.add_argument(
        "--variants",
        type=lambda text: text.split(","),
        default=list(VARIANTS),
        help=f"comma-separated, of {','.join(VARIANTS)}",
    )
    parser.add_argument(
        "--per-seed", action="store_true", help="each seed's figures too, not only the range"
    )
    parser.add_argument("--bins", type=float, help="a load: each seed's run per 10 s (above)")
    args = parser.parse_args()
    logging.getLogger("fusion_guard").setLevel(logging.CRITICAL)
    if args.bins is not None:
        for seeds in args.seeds or [_seeds("1-3")]:
            for name in args.variants:
                for seed in seeds:
                    _bins(replace(model_named("slow_llm"), **VARIANTS[name]), args.bins, seed)
        return
    for seeds in args.seeds or [_seeds("1-3"), _seeds("4-8")]:
        for name in args.variants:
            model = replace(model_named("slow_llm"), **VARIANTS[name])
            for load in LOADS:
                oracle, fixed, shed, limit = [], [], [], []
                for seed in seeds:
                    cell = run_in_virtual_time(
                        functools.partial(
                            run_cell, model, load, seed, ("oracle", "fixed10", "auto")
                        )
                    )
                    auto, best, ten = (cell.policies[p] for p in ("auto", "oracle", "fixed10"))
                    assert auto is not None
                    assert best is not None
                    assert ten is not None
                    oracle.append(auto.goodput_slo / best.goodput_slo)
                    fixed.append(auto.goodput_slo / ten.goodput_slo)
                    shed.append(100 * auto.shed)
                    limit.append(auto.mean_limit or 0.0)
                    if args.per_seed:
                        print(
                            f"{name:8} seed {seed} {load:g}x: / oracle {oracle[-1]:.2f},"
                            f" / fixed 10 {fixed[-1]:.2f}, shed {shed[-1]:.1f} %,"
                            f" limit {limit[-1]:.1f}",
                            flush=True,
                        )
                print(
                    f"{name:8} seeds {seeds.start}-{seeds.stop - 1} {load:g}x:"
                    f" / oracle {min(oracle):.2f}-{max(oracle):.2f},"
                    f" / fixed 10 {min(fixed):.2f}-{max(fixed):.2f},"
                    f" shed {min(shed):.1f}-{max(shed):.1f} %,"
                    f" limit {min(limit):.1f}-{max(limit):.1f}",
                    flush=True,
                )


def _bins(model: Any, load: float, seed: int) -> None:
    """One seed's run at ``load``, per 10 s: calls served within the SLO, and the slots."""
    begin, runs = run_in_virtual_time(
        functools.partial(_simulate, model, load, seed, ("fixed10", "auto"))
    )
    edges = range(0, int(model.total_s), 10)
    for policy, run in runs.items():
        served = [
            sum(
                1
                for r in run.records
                if r.outcome == "ok"
                and r.latency <= model.slo_s
                and begin + b <= r.intended + r.latency < begin + b + 10
            )
            for b in edges
        ]
        print(f"seed {seed} {load:g}x {policy:8}", " ".join(f"{n:4d}" for n in served))
        if policy == "auto":
            slots = [[limit for at, limit in run.limits if b <= at < b + 10] or [0] for b in edges]
            print(
                f"seed {seed} {load:g}x {'slots':8}",
                " ".join(f"{sum(x) / len(x):4.1f}" for x in slots),
            )


if __name__ == "__main__":
    main()
