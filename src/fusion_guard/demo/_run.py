"""The whole demo: every policy at every load, with progress, figures and the targets check."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ._policies import POLICY_NAMES, GuardFactory
from ._scenario import DEFAULT_LOADS, LevelResult, Scenario, run_load

__all__ = ["DemoResult", "Progress", "estimate_seconds", "run_demo"]

Progress = Callable[[float, int, int, float, float], None]
"""progress(load, level_index, level_count, elapsed_s, remaining_s)"""

_DRAIN_ALLOWANCE_S = 0.3


@dataclass(frozen=True)
class DemoResult:
    scenario: Scenario
    results: tuple[LevelResult, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "capacity_rps": self.scenario.model.capacity_rps,
            "uncontended_p99_ms": round(self.scenario.model.uncontended_p99_s * 1000.0, 3),
            "slo_ms": self.scenario.slo_s * 1000.0,
            "client_timeout_s": self.scenario.client_timeout_s,
            "duration_s": self.scenario.duration_s,
            "seed": self.scenario.seed,
            "results": [r.to_json() for r in self.results],
        }


def _run_seconds(scenario: Scenario, load: float) -> float:
    recovery = scenario.recovery_s if load > 1.0 else 0.0
    return scenario.warmup_s + scenario.duration_s + recovery + _DRAIN_ALLOWANCE_S


def estimate_seconds(scenario: Scenario, loads: Sequence[float]) -> float:
    return sum(_run_seconds(scenario, load) for load in loads)


async def run_demo(
    scenario: Scenario,
    guard_factory: GuardFactory,
    *,
    loads: Sequence[float] = DEFAULT_LOADS,
    policies: Sequence[str] = POLICY_NAMES,
    progress: Progress | None = None,
) -> DemoResult:
    started = time.monotonic()
    remaining = estimate_seconds(scenario, loads)
    results: list[LevelResult] = []
    for index, load in enumerate(loads):
        if progress is not None:
            progress(load, index, len(loads), time.monotonic() - started, remaining)
        results += await run_load(load, scenario, guard_factory, policies)
        remaining -= _run_seconds(scenario, load)
    ordered = sorted(results, key=lambda r: (list(policies).index(r.policy), r.load))
    return DemoResult(scenario, tuple(ordered))
