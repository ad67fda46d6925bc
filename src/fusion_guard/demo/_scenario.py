"""One scenario run: warm-up, an overload window at a multiple of capacity, then a recovery
phase at half capacity; and the figures of docs/benchmarks.md computed from the calls' records."""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import anyio

from ._loadgen import CallRecord, drive_tool, percentile, poisson_arrivals
from ._policies import GuardFactory, make_policy
from ._tool import SimulatedTool, ToolModel

__all__ = ["LevelResult", "Scenario", "run_load", "summarise"]

DEFAULT_LOADS = (0.5, 0.8, 1.0, 1.5, 2.0, 4.0, 10.0)
RECOVERY_LOAD = 0.5
_RECOVERY_WINDOW_S = 0.5
_RECOVERY_STEP_S = 0.1


@dataclass(frozen=True, kw_only=True)
class Scenario:
    model: ToolModel = field(default_factory=ToolModel)
    duration_s: float = 7.0
    """Length of the overload window at each load level."""
    warmup_s: float = 0.5
    recovery_s: float = 2.5
    """Length of the 0.5x phase after an overload (load > 1) in which recovery is timed."""
    client_timeout_s: float = 1.0
    slo_s: float = 0.2
    """Goodput within the SLO counts calls answered OK within this (10x the mean service)."""
    seed: int = 1


@dataclass(frozen=True, kw_only=True)
class LevelResult:
    policy: str
    load: float
    goodput: float
    goodput_slo: float
    p50_ms: float | None
    p99_ms: float | None
    shed_rate: float
    timeout_rate: float
    shed_p99_ms: float | None
    recovery_s: float | None
    send_lag_p99_ms: float | None
    calls: int
    ok: int
    shed: int
    rate_limited: int
    timeouts: int
    errors: int
    capacity_rps: float
    """The capacity goodput is divided by (see ``SimulatedTool.realised_capacity``)."""
    peak_inside_tool: int

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


def _is_normal(window: Sequence[CallRecord], p99_limit: float) -> bool:
    failures = sum(1 for r in window if r.outcome != "ok")
    p99 = percentile([r.latency for r in window], 0.99)
    return failures <= 0.05 * len(window) and (p99 is None or p99 <= p99_limit)


def recovery_time(
    records: Sequence[CallRecord], start: float, end: float, p99_limit: float
) -> float | None:
    """Seconds from ``start`` (the end of the overload) to the first sliding window after which
    every window is back to normal (<= 5 % failures, p99 within ``p99_limit``); None if never."""
    ordered = sorted((r for r in records if start <= r.intended < end), key=lambda r: r.intended)
    windows: list[tuple[float, bool]] = []
    t = start
    while t + _RECOVERY_WINDOW_S <= end + 1e-9:
        window = [r for r in ordered if t <= r.intended < t + _RECOVERY_WINDOW_S]
        windows.append((t, _is_normal(window, p99_limit)))
        t += _RECOVERY_STEP_S
    recovered_at: float | None = None
    for t, normal in windows:
        if not normal:
            recovered_at = None
        elif recovered_at is None:
            recovered_at = t
    return None if recovered_at is None else round(recovered_at - start, 3)


def summarise(
    policy: str,
    load: float,
    scenario: Scenario,
    records: Sequence[CallRecord],
    window: tuple[float, float],
    recovery: tuple[float, float] | None,
    tool: SimulatedTool,
) -> LevelResult:
    start, end = window
    inside = [r for r in records if start <= r.intended < end]
    counts = {o: 0 for o in ("ok", "shed", "rate_limited", "timeout", "error")}
    for r in inside:
        counts[r.outcome] += 1
    served = [r.latency for r in inside if r.outcome in ("ok", "timeout", "error")]
    # A shed's answer time runs from the moment the call was sent: the load generator's own lag
    # (reported apart as send_lag_p99_ms) is not time the guard kept the caller waiting.
    sheds = [
        r.intended + r.latency - r.sent for r in inside if r.outcome in ("shed", "rate_limited")
    ]
    # Capacity is what the workers could serve with the service times they actually drew: with
    # sigma = 1 a few hundred draws stray by several per cent, luck that is not the policy's.
    capacity = tool.realised_capacity(start, end)
    capacity_calls = capacity * (end - start)
    # Goodput counts OK answers delivered during the window, whenever the call arrived.
    ok_latencies = [
        r.latency for r in records if r.outcome == "ok" and start <= r.intended + r.latency < end
    ]
    total = max(1, len(inside))
    p99_limit = 2.5 * scenario.model.uncontended_p99_s
    return LevelResult(
        policy=policy,
        load=load,
        goodput=round(len(ok_latencies) / capacity_calls, 4),
        goodput_slo=round(sum(1 for x in ok_latencies if x <= scenario.slo_s) / capacity_calls, 4),
        p50_ms=_ms(percentile(served, 0.50)),
        p99_ms=_ms(percentile(served, 0.99)),
        shed_rate=round((counts["shed"] + counts["rate_limited"]) / total, 4),
        timeout_rate=round(counts["timeout"] / total, 4),
        shed_p99_ms=_ms(percentile(sheds, 0.99)),
        recovery_s=None if recovery is None else recovery_time(records, *recovery, p99_limit),
        send_lag_p99_ms=_ms(percentile([r.sent - r.intended for r in inside], 0.99)),
        calls=len(inside),
        ok=counts["ok"],
        shed=counts["shed"],
        rate_limited=counts["rate_limited"],
        timeouts=counts["timeout"],
        errors=counts["error"],
        capacity_rps=round(capacity, 2),
        peak_inside_tool=tool.peak_inside,
    )


async def run_load(
    load: float,
    scenario: Scenario,
    guard_factory: GuardFactory,
    policies: Sequence[str],
    *,
    records_out: dict[str, list[CallRecord]] | None = None,
) -> list[LevelResult]:
    """Run every policy at one load level, side by side in one event loop: each policy has its
    own tool, and all of them receive the very same arrivals and service-time draws, so the
    comparison is call for call."""
    rng = random.Random(f"{scenario.seed}:arrivals:{load}")
    capacity = scenario.model.capacity_rps
    now = anyio.current_time()
    warm_end = now + scenario.warmup_s
    over_end = warm_end + scenario.duration_s
    arrivals = poisson_arrivals(RECOVERY_LOAD * capacity, now, scenario.warmup_s, rng)
    arrivals += poisson_arrivals(load * capacity, warm_end, scenario.duration_s, rng)
    recovery: tuple[float, float] | None = None
    if load > 1.0:
        recovery = (over_end, over_end + scenario.recovery_s)
        arrivals += poisson_arrivals(RECOVERY_LOAD * capacity, over_end, scenario.recovery_s, rng)
    tools = {
        name: SimulatedTool(scenario.model, random.Random(f"{scenario.seed}:service:{load}"))
        for name in policies
    }
    records: dict[str, list[CallRecord]] = {name: [] for name in policies}
    if records_out is not None:
        records_out.update(records)

    async with anyio.create_task_group() as tg:
        for name in policies:
            tg.start_soon(
                functools.partial(
                    drive_tool,
                    arrivals,
                    make_policy(name, tools[name], guard_factory),
                    tools[name],
                    client_timeout=scenario.client_timeout_s,
                    records=records[name],
                )
            )
    return [
        summarise(
            name,
            load,
            scenario,
            records[name],
            (warm_end, over_end),
            recovery,
            tools[name],
        )
        for name in policies
    ]
