"""The adaptive limit meets its targets in the simulation it was chosen with (benchmarks/
limit_sim.py; deterministic, simulated time): in every phase of the shifting scenario, 3 s after
each change, goodput within the SLO >= 0.85x the oracle's and better than the fixed default's worst
phase; within [0.5x, 2x] of the true worker count within 2 s of each change; at a steady 0.8x
load, <= 1 % shed and a limit whose coefficient of variation is <= 0.25."""

from __future__ import annotations

import pytest

from fusion_guard.admission._adaptive import GradientLimit
from limit_sim import PHASES, STEADY, simulate


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_limit_follows_a_shifting_capacity(seed: int) -> None:
    oracle = simulate(None, PHASES, oracle=True, seed=seed)
    fixed = simulate(None, PHASES, fixed=10, seed=seed)
    auto = simulate(GradientLimit, PHASES, seed=seed)
    for phase, (got, best) in enumerate(
        zip(auto.per_phase_goodput, oracle.per_phase_goodput, strict=True)
    ):
        assert got >= 0.85 * best, (phase, got, best)
        assert got > min(fixed.per_phase_goodput), (phase, got)
    assert all(t is not None and t <= 2.0 for t in auto.convergence), auto.convergence


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_limit_holds_still_at_steady_load(seed: int) -> None:
    auto = simulate(GradientLimit, STEADY, load=0.8, seed=seed)
    assert auto.shed <= 0.01
    assert auto.limit_cv <= 0.25
