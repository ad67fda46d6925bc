"""The adaptive limit against its targets in the simulation it was chosen with (benchmarks/
limit_sim.py; deterministic, simulated time), over seeds 1-30: in every phase of the shifting
scenario, 3 s after each change, goodput within the SLO >= 0.85x the oracle's and better than the
worst phase of a fixed 10 (the old default); within [0.5x, 2x] of the true worker count within
2 s of each change; at a steady 0.8x load, <= 1 % shed and a limit whose coefficient of
variation is <= 0.25.

Not every seed meets every target (docs/adaptive.md says which miss and why), so the checks count
seeds: each floor is one or two below what was measured, and a change that loses more fails."""

from __future__ import annotations

from fusion_guard.admission._adaptive import GradientLimit
from limit_sim import PHASES, STEADY, capacity_drop, simulate

SEEDS = range(1, 31)


def test_the_limit_follows_a_shifting_capacity() -> None:
    within_oracle = 0
    for seed in SEEDS:
        oracle = simulate(None, PHASES, oracle=True, seed=seed)
        fixed = simulate(None, PHASES, fixed=10, seed=seed)
        auto = simulate(GradientLimit, PHASES, seed=seed)
        assert min(auto.per_phase_goodput) > min(fixed.per_phase_goodput), seed
        assert all(t is not None and t <= 2.0 for t in auto.convergence), (seed, auto.convergence)
        worst = min(
            got / best
            for got, best in zip(auto.per_phase_goodput, oracle.per_phase_goodput, strict=True)
        )
        within_oracle += worst >= 0.85
    assert within_oracle >= 25  # measured: 26 of 30


def test_the_limit_holds_still_at_steady_load() -> None:
    runs = [simulate(GradientLimit, STEADY, load=0.8, seed=seed) for seed in SEEDS]
    assert sum(run.shed <= 0.01 for run in runs) >= 26  # measured: 27 of 30
    assert sum(run.limit_cv <= 0.25 for run in runs) >= 27  # measured: 28 of 30


def test_a_capacity_drop_under_heavy_tails_is_followed_within_two_seconds() -> None:
    # 8 -> 1 workers, log-normal sigma 0.7 and 1.0 (issue 41): within 2x of one worker within
    # 2 s on every seed (measured: 0.21-0.56 s on seeds 1-8; 0.44-0.80 s before early windows
    # were decided on runs of slow calls), and the one-worker phase near the oracle's goodput.
    for sigma in (0.7, 1.0):
        ratios, within = capacity_drop(range(1, 16), sigma)
        assert all(w is not None and w <= 2.0 for w in within), (sigma, within)
        assert sum(r >= 0.85 for r in ratios) >= 12, (sigma, ratios)
