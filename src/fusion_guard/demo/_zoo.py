"""The tool zoo (issue 41, docs/zoo.md): every model of ``_zoo_models`` at several multiples of
its capacity, under no guard, a fixed limit at its true worker count (the oracle), a fixed 10,
``Guard()`` at its defaults (``auto``) and, for tools that raise an overload error,
``Guard(overload_errors=...)`` naming it; plus the cells of the issue's other targets: 20 %
load-independent errors, a backend down for 10 s, a capacity drop 8 -> 1, and a cold burst.

Arrivals are open-loop Poisson at ``load`` times the tool's current capacity, drawn once per
seed, model and load with each call's work; every policy receives the very same calls side by
side in one event loop, each with its own instance of the tool, so their figures differ by what
they admit and when. A caller gives up (cancels) at the model's ``client_timeout_s``. The guards
read the loop's clock (``anyio.current_time``): ``fusion-guard demo --scenario zoo`` and
``benchmarks/zoo.py`` run in virtual time (``_virtual_time``), the spot checks on the real clock.

Per cell and policy, over the measured window (the model's ``settle_s`` left out): goodput within
the SLO (OK answers within ``slo_s`` per second, over the capacity), the share of calls refused
(SERVER_BUSY or RATE_LIMITED), errors and overload errors over the calls admitted to the tool,
the share of the excess load (the calls beyond what the capacity serves) answered SERVER_BUSY
with a ``retry_after``, the p50 and p99 of OK answers, and the limit in force (its mean).
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import anyio

from .._exceptions import ServerBusy
from ..admission._concurrency import ConcurrencyGuard
from ._loadgen import CallRecord, Outcome, drive_calls, percentile, poisson_arrivals
from ._zoo_models import (
    MODELS,
    HeavyTail,
    Job,
    PoolExhausted,
    QueueingPool,
    ShiftingPool,
    UpstreamRateLimited,
    ZooModel,
    ZooTool,
)

__all__ = [
    "DEFAULT_LOADS",
    "EXTRA_LOADS",
    "GRID_POLICIES",
    "POLICIES",
    "CellResult",
    "ColdBurstResult",
    "DropResult",
    "OutageResult",
    "PolicyFigures",
    "ZooResult",
    "ZooScenario",
    "cold_burst",
    "run_cell",
    "run_drop",
    "run_outage",
    "run_zoo",
]

GRID_POLICIES = ("none", "oracle", "fixed10", "auto", "auto_named")
"""Every model at every load: ``auto_named`` is ``Guard(overload_errors=<the model's>)``, for
models that raise one."""
POLICIES = (*GRID_POLICIES, "oracle_tight")
"""And ``oracle_tight`` (the ``tight`` cell only): the oracle's limit with ``TIGHT_QUEUE``."""
#: The queue of issue 41's case of predictive shedding at 0.8x.
TIGHT_QUEUE: dict[str, Any] = {"max_queue": 16, "queue_timeout": 0.15}
DEFAULT_LOADS = (0.5, 0.8, 1.5, 4.0)
#: Loads some models are also run at: the fail-fast pool's targets are at 2x and 3x.
EXTRA_LOADS: dict[str, tuple[float, ...]] = {"fail_fast": (2.0, 3.0)}
FIXED_LIMIT = 10
_TOOL = "zoo.tool"
_SAMPLE_S = 0.05
#: What the tools raise when overloaded, counted apart from other errors.
_OVERLOAD = (PoolExhausted, UpstreamRateLimited)


@dataclass(frozen=True, kw_only=True)
class PolicyFigures:
    goodput_slo: float
    """OK answers within the SLO per second, over the capacity (the measured window)."""
    shed: float
    """SERVER_BUSY and RATE_LIMITED answers over the calls sent."""
    timeouts: float
    """Calls the client gave up on, or answered TIMEOUT, over the calls sent."""
    errors: float | None
    """Errors other than overload errors over the calls admitted to the tool (None: none)."""
    overload_errors: float | None
    """Overload errors (``PoolExhausted``, 429) over the calls admitted to the tool."""
    busy_of_excess: float | None
    """SERVER_BUSY answers with a ``retry_after`` over the calls beyond the capacity (None: the
    load did not exceed it)."""
    p50_ms: float | None
    p99_ms: float | None
    """Of the OK answers."""
    mean_limit: float | None
    """The limit in force, averaged over the window (None: no guard)."""
    calls: int


@dataclass(frozen=True)
class CellResult:
    model: str
    load: float
    policies: dict[str, PolicyFigures]
    variant: str = ""
    """"" for the grid, ``errors20`` for the load-independent errors' cell, ``tight`` for the
    heavy tail behind ``max_active=2`` and a tight queue (``TIGHT_QUEUE``)."""

    def ratio(self, policy: str, to: str = "oracle") -> float | None:
        """``policy``'s goodput within the SLO over ``to``'s (None: either missing)."""
        mine, theirs = self.policies.get(policy), self.policies.get(to)
        if mine is None or theirs is None or theirs.goodput_slo <= 0:
            return None
        return round(mine.goodput_slo / theirs.goodput_slo, 3)


@dataclass(frozen=True, kw_only=True)
class OutageFigures:
    probes_min_per_s: int
    """The fewest calls that reached the tool in any second of the outage."""
    probes_mean_per_s: float
    goodput_before: float
    """OK answers within the SLO per second over the capacity, before the outage."""
    recovery_s: float | None
    """From the backend's recovery until a second's goodput is back to 0.9x the one before
    (None: not within the run)."""


@dataclass(frozen=True)
class OutageResult:
    model: str
    load: float
    down_s: float
    policies: dict[str, OutageFigures]


@dataclass(frozen=True, kw_only=True)
class DropFigures:
    reach_s: float | None
    """From the drop until the limit first came within 2x of the true count (None: never)."""
    goodput_slo: float
    """In the one-worker phase, from ``follow_s`` after the drop."""
    mean_limit: float | None


@dataclass(frozen=True)
class DropResult:
    sigma: float
    load: float
    follow_s: float
    policies: dict[str, DropFigures]

    def ratio(self, policy: str = "auto") -> float | None:
        oracle = self.policies["oracle"].goodput_slo
        return round(self.policies[policy].goodput_slo / oracle, 3) if oracle > 0 else None


@dataclass(frozen=True)
class ColdBurstResult:
    calls: int
    workers: int
    hold_s: float
    gap_s: float
    ideal_s: float
    done_x: dict[str, dict[str, float]]
    """Per guard (``default``, ``max_active=2``), ``cold`` and ``warm``: the last call's answer,
    over the ideal drain."""


@dataclass(frozen=True, kw_only=True)
class ZooScenario:
    models: tuple[str, ...] = tuple(m.name for m in MODELS)
    loads: tuple[float, ...] = DEFAULT_LOADS
    extra_loads: bool = True
    """Run each model's ``EXTRA_LOADS`` too (the fail-fast pool at 2x and 3x)."""
    special: bool = True
    """The cells of the other targets: errors, outage, drop, cold burst."""
    seed: int = 1

    def loads_of(self, model: str) -> tuple[float, ...]:
        extra = EXTRA_LOADS.get(model, ()) if self.extra_loads else ()
        return tuple(sorted(set(self.loads) | set(extra)))


@dataclass(frozen=True)
class ZooResult:
    scenario: ZooScenario
    cells: tuple[CellResult, ...]
    outage: OutageResult | None = None
    drops: tuple[DropResult, ...] = ()
    cold: ColdBurstResult | None = None
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per model: its parameters, capacity, true worker count, SLO."""

    def cell(self, model: str, load: float, variant: str = "") -> CellResult:
        return next(c for c in self.cells if (c.model, c.load, c.variant) == (model, load, variant))

    def to_json(self) -> dict[str, object]:
        return {
            "scenario": asdict(self.scenario),
            "models": self.models,
            "cells": [asdict(c) for c in self.cells],
            "outage": None if self.outage is None else asdict(self.outage),
            "drops": [asdict(d) for d in self.drops],
            "cold_burst": None if self.cold is None else asdict(self.cold),
        }


def describe(model: ZooModel) -> dict[str, Any]:
    return {
        "title": model.title,
        "parameters": model.parameters(),
        "capacity_rps": round(model.capacity_rps, 2),
        "workers": model.workers,
        "slo_s": model.slo_s,
        "client_timeout_s": model.client_timeout_s,
        "settle_s": model.settle_s,
        "duration_s": model.duration_s,
    }


# --- one run: every policy on the same calls ---------------------------------------------------


class _OracleLimit:
    """A ``Limit`` set from outside to the true worker count at each change."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def on_sample(self, start: float, duration: float, inflight: int, dropped: bool) -> None:
        pass


@dataclass
class _Run:
    """What one policy did: a record per call, per arrival what the guard and tool said, the
    limit in force over time, and its tool."""

    tool: ZooTool
    records: list[CallRecord] = field(default_factory=list)
    entered: dict[int, bool] = field(default_factory=dict)
    overload: dict[int, bool] = field(default_factory=dict)
    advised: dict[int, bool] = field(default_factory=dict)
    """Per arrival refused SERVER_BUSY: whether it carried a ``retry_after``."""
    limits: list[tuple[float, int]] = field(default_factory=list)
    index_of: dict[float, int] = field(default_factory=dict)


_Caller = Callable[[int], Any]


async def _reach_tool(run: _Run, job: Job, index: int) -> str:
    """Call ``index`` reaches the tool: counted as entered, and marked when the tool raised an
    overload error. The error still propagates, so a guard or a slot around it sees the call
    fail as it would in a real server."""
    run.entered[index] = True
    try:
        return await run.tool(job)
    except _OVERLOAD:
        run.overload[index] = True
        raise


def _guard_caller(guard: Any, run: _Run, jobs: Sequence[Job]) -> _Caller:
    async def call(index: int) -> Outcome:
        async def handler() -> str:
            return await _reach_tool(run, jobs[index], index)

        response = await guard.call(_TOOL, handler)
        if not response.is_error:
            return "ok"
        code = response.code
        if code == "SERVER_BUSY":
            facts = response.facts or {}
            run.advised[index] = facts.get("retry_after") is not None
            return "shed"
        if code == "RATE_LIMITED":
            return "rate_limited"
        if code == "TIMEOUT":
            return "timeout"
        return "error"

    return call


def _slots_caller(slots: ConcurrencyGuard, run: _Run, jobs: Sequence[Job]) -> _Caller:
    """Through bare slots (the oracle that follows a shifting pool): what ``Guard.call`` does
    around them, as far as the figures see it."""

    async def call(index: int) -> Outcome:
        try:
            async with slots.slot():
                await _reach_tool(run, jobs[index], index)
        except ServerBusy as busy:
            run.advised[index] = busy.retry_after is not None
            return "shed"
        except Exception:
            return "error"
        return "ok"

    return call


def _bare_caller(run: _Run, jobs: Sequence[Job]) -> _Caller:
    async def call(index: int) -> Outcome:
        try:
            await _reach_tool(run, jobs[index], index)
        except Exception:
            return "error"
        return "ok"

    return call


def _make_policy(
    policy: str, model: ZooModel, run: _Run, jobs: Sequence[Job], oracle: _OracleLimit
) -> tuple[_Caller, Callable[[], int] | None]:
    """How a call goes through ``policy`` and how to read its limit in force."""
    from .._guard import Guard

    if policy == "none":
        return _bare_caller(run, jobs), None
    options: dict[str, Any] = {"metrics": False, "clock": anyio.current_time}
    if policy == "oracle":
        if len(model.phases()) > 1:  # follows the pool: set at each change
            defaults = Guard(max_active=model.workers, metrics=False).limits(_TOOL)
            slots = ConcurrencyGuard(
                limit=oracle,
                max_queue=10 * model.workers,
                queue_timeout=math.inf
                if defaults.queue_timeout is None
                else defaults.queue_timeout,
                name=_TOOL,
                clock=anyio.current_time,
            )
            return _slots_caller(slots, run, jobs), lambda: slots.limit
        options["max_active"] = model.workers
    elif policy == "oracle_tight":  # issue 41's predictive-shedding case
        options.update(max_active=model.workers, **TIGHT_QUEUE)
    elif policy == "fixed10":
        options["max_active"] = FIXED_LIMIT
    elif policy == "auto_named":
        options["overload_errors"] = model.overload_errors
    elif policy != "auto":
        raise ValueError(f"policy {policy!r}: expected one of {', '.join(POLICIES)}")
    guard = Guard(**options)
    slots_of = guard.concurrency(_TOOL)
    return _guard_caller(guard, run, jobs), (None if slots_of is None else lambda: slots_of.limit)


async def _simulate(
    model: ZooModel,
    load: float,
    seed: int,
    policies: Sequence[str],
    *,
    bad_share: float = 0.0,
    down: tuple[float, float] | None = None,
) -> tuple[float, dict[str, _Run]]:
    """Every policy on the same arrivals and calls; (the start's loop time, each run)."""
    tag = f"{seed}:zoo:{model.name}:{load:g}:{bad_share:g}"
    arrival_rng, job_rng, bad_rng = (random.Random(f"{tag}:{part}") for part in "ajb")
    begin = anyio.current_time()
    phases = list(model.phases())
    arrivals: list[float] = []
    for i, (offset, _, capacity) in enumerate(phases):
        until = phases[i + 1][0] if i + 1 < len(phases) else model.total_s
        arrivals += poisson_arrivals(load * capacity, begin + offset, until - offset, arrival_rng)
    jobs = [
        replace(job, bad=True) if bad_rng.random() < bad_share else job
        for job in (model.draw(job_rng) for _ in arrivals)
    ]
    oracle = _OracleLimit(model.workers)
    runs: dict[str, _Run] = {}
    callers: dict[str, tuple[_Caller, Callable[[], int] | None]] = {}
    for policy in policies:
        if policy == "auto_named" and not model.overload_errors:
            continue  # nothing to name
        run = _Run(model.make_tool())
        if down is not None:
            run.tool.down = (begin + down[0], begin + down[1])
        callers[policy] = _make_policy(policy, model, run, jobs, oracle)
        runs[policy] = run
    end = begin + model.total_s

    async def shift() -> None:
        for offset, workers, _ in phases[1:]:
            await anyio.sleep_until(begin + offset)
            oracle.limit = workers
            for run in runs.values():
                if run is not None:
                    run.tool.set_workers(workers)

    async def sample() -> None:
        while anyio.current_time() < end:
            at = anyio.current_time() - begin
            for policy, (_, limit_of) in callers.items():
                if limit_of is not None:
                    runs[policy].limits.append((at, limit_of()))
            await anyio.sleep(_SAMPLE_S)

    async with anyio.create_task_group() as tg:
        if len(phases) > 1:
            tg.start_soon(shift)
        tg.start_soon(sample)
        index_of = {t: i for i, t in enumerate(arrivals)}
        for policy, (caller, _) in callers.items():
            driven = runs[policy]
            assert driven is not None
            driven.index_of = index_of
            tg.start_soon(
                functools.partial(
                    drive_calls,
                    arrivals,
                    caller,
                    lambda index: index,
                    client_timeout=model.client_timeout_s,
                    records=driven.records,
                )
            )
    return begin, runs


def _capacity_calls(model: ZooModel, start: float, end: float) -> float:
    """The calls the tool's true capacity serves in ``[start, end)`` (seconds from the run's
    start), phase by phase."""
    phases = list(model.phases())
    total = 0.0
    for i, (offset, _, capacity) in enumerate(phases):
        until = phases[i + 1][0] if i + 1 < len(phases) else model.total_s
        total += capacity * max(0.0, min(end, until) - max(start, offset))
    return total


def _ok_in_slo(run: _Run, slo: float, start: float, end: float) -> int:
    return sum(
        1
        for r in run.records
        if r.outcome == "ok" and r.latency <= slo and start <= r.intended + r.latency < end
    )


def _figures(model: ZooModel, run: _Run, begin: float, start: float, end: float) -> PolicyFigures:
    """The figures of ``run`` over ``[start, end)`` (seconds from ``begin``)."""
    lo, hi = begin + start, begin + end
    capacity_calls = _capacity_calls(model, start, end)
    inside = [r for r in run.records if lo <= r.intended < hi]
    sent = max(1, len(inside))
    index_of = run.index_of
    indices = [index_of[r.intended] for r in inside]
    admitted = [i for i in indices if run.entered.get(i)]
    errors = sum(
        1
        for r, i in zip(inside, indices, strict=True)
        if r.outcome == "error" and run.entered.get(i) and not run.overload.get(i)
    )
    overloads = sum(1 for i in admitted if run.overload.get(i))
    advised = sum(
        1
        for r, i in zip(inside, indices, strict=True)
        if r.outcome == "shed" and run.advised.get(i)
    )
    excess = len(inside) - capacity_calls
    oks = [r.latency for r in inside if r.outcome == "ok"]
    p50, p99 = percentile(oks, 0.5), percentile(oks, 0.99)
    in_window = [limit for at, limit in run.limits if start <= at < end]
    return PolicyFigures(
        goodput_slo=round(_ok_in_slo(run, model.slo_s, lo, hi) / capacity_calls, 4),
        shed=round(sum(r.outcome in ("shed", "rate_limited") for r in inside) / sent, 4),
        timeouts=round(sum(r.outcome == "timeout" for r in inside) / sent, 4),
        errors=round(errors / len(admitted), 4) if admitted else None,
        overload_errors=round(overloads / len(admitted), 4) if admitted else None,
        # Below 5 % of the calls over capacity the share is Poisson luck, not a figure.
        busy_of_excess=round(advised / excess, 4) if excess > 0.05 * len(inside) else None,
        p50_ms=None if p50 is None else round(p50 * 1000, 1),
        p99_ms=None if p99 is None else round(p99 * 1000, 1),
        mean_limit=round(sum(in_window) / len(in_window), 2) if in_window else None,
        calls=len(inside),
    )


async def run_cell(
    model: ZooModel,
    load: float,
    seed: int,
    policies: Sequence[str] = GRID_POLICIES,
    *,
    bad_share: float = 0.0,
    variant: str = "",
) -> CellResult:
    """One model at one load, every policy side by side (``bad_share``: the calls whose input
    is bad, failing at once whatever the load)."""
    begin, runs = await _simulate(model, load, seed, policies, bad_share=bad_share)
    return CellResult(
        model.name,
        load,
        {
            policy: _figures(model, run, begin, model.settle_s, model.total_s)
            for policy, run in runs.items()
        },
        variant,
    )


# --- the special cells -------------------------------------------------------------------------

OUTAGE_MODEL = QueueingPool(settle_s=3.0, duration_s=25.0)
OUTAGE_AT = (8.0, 18.0)
"""The backend is down from 8 s to 18 s of the run (5 s measured before it, 10 s after)."""


async def run_outage(seed: int, load: float = 0.8) -> OutageResult:
    """The database pool, down for 10 s (every call fails at once with ``BackendDown``): how
    many calls still reach it each second, and how soon goodput is back after it recovers."""
    model = OUTAGE_MODEL
    policies = ("none", "oracle", "fixed10", "auto")
    begin, runs = await _simulate(model, load, seed, policies, down=OUTAGE_AT)
    down_at, up_at = OUTAGE_AT
    figures = {}
    for policy, run in runs.items():
        assert run is not None
        per_second = [0] * int(up_at - down_at)
        for t in run.tool.entered:
            offset = t - begin - down_at
            if 0 <= offset < len(per_second):
                per_second[int(offset)] += 1
        before = _ok_in_slo(run, model.slo_s, begin + model.settle_s, begin + down_at)
        before_rate = before / (down_at - model.settle_s)
        figures[policy] = OutageFigures(
            probes_min_per_s=min(per_second),
            probes_mean_per_s=round(sum(per_second) / len(per_second), 2),
            goodput_before=round(before_rate / model.capacity_rps, 4),
            recovery_s=_recovery(run, model, begin + up_at, begin + model.total_s, before_rate),
        )
    return OutageResult(model.name, load, OUTAGE_AT[1] - OUTAGE_AT[0], figures)


def _recovery(
    run: _Run, model: ZooModel, up: float, end: float, before_rate: float
) -> float | None:
    """Seconds from ``up`` to the first 1 s window (stepped by 0.1 s) with at least 0.9x
    ``before_rate`` OK answers within the SLO."""
    done = sorted(
        r.intended + r.latency
        for r in run.records
        if r.outcome == "ok" and r.latency <= model.slo_s and r.intended + r.latency >= up
    )
    for step in range(int((end - up - 1.0) * 10) + 1):
        t = up + step / 10
        if sum(1 for x in done if t <= x < t + 1.0) >= 0.9 * before_rate:
            return round(t - up, 2)
    return None


DROP_FOLLOW_S = 2.0
"""The target's time to follow a drop: the one-worker phase's goodput is measured after it."""


def drop_model(sigma: float) -> ShiftingPool:
    """8 -> 1 workers, log-normal 20 ms: 5 s at 8 workers, 8 s at one."""
    return ShiftingPool(
        shifts=(8, 1),
        phase_s=(5.0, 8.0),
        mean_s=0.020,
        sigma=sigma,
        slo_s=0.25,
        client_timeout_s=1.0,
        settle_s=2.0,
    )


async def run_drop(sigma: float, seed: int, load: float = 1.5) -> DropResult:
    """A capacity drop 8 -> 1 at ``load`` times the current capacity: how soon each limit is
    within 2x of the one worker, and goodput within the SLO in the one-worker phase."""
    model = drop_model(sigma)
    policies = ("oracle", "fixed10", "auto")
    begin, runs = await _simulate(model, load, seed, policies)
    drop_at = model.phases()[1][0]
    start, end = drop_at + DROP_FOLLOW_S, model.total_s
    figures = {}
    for policy, run in runs.items():
        assert run is not None
        reach = next((at - drop_at for at, limit in run.limits if at >= drop_at and limit <= 2),
                     None)  # fmt: skip
        in_phase = [limit for at, limit in run.limits if start <= at < end]
        oks = _ok_in_slo(run, model.slo_s, begin + start, begin + end)
        figures[policy] = DropFigures(
            reach_s=None if reach is None else round(reach, 2),
            goodput_slo=round(oks / _capacity_calls(model, start, end), 4),
            mean_limit=round(sum(in_phase) / len(in_phase), 2) if in_phase else None,
        )
    return DropResult(sigma, load, DROP_FOLLOW_S, figures)


COLD_CALLS, COLD_WORKERS, COLD_HOLD_S, COLD_GAP_S = 30, 2, 0.05, 0.005


async def cold_burst(
    max_active: int | None,
    *,
    warm: bool,
    calls: int = COLD_CALLS,
    hold: float = COLD_HOLD_S,
    gap: float = COLD_GAP_S,
) -> float:
    """``calls`` callers, ``gap`` apart, at a tool of 2 workers (calls of ``hold`` seconds;
    more wait inside it), each refused caller back at exactly its ``retry_after``: when the last
    answered OK, from the first arrival. ``max_active`` None: ``Guard()``. ``warm``: the guard
    first served 2 s of calls at half the capacity, then 1 s of quiet."""
    from .._guard import Guard

    options: dict[str, Any] = {} if max_active is None else {"max_active": max_active}
    guard = Guard(metrics=False, clock=anyio.current_time, **options)
    model = QueueingPool(workers=COLD_WORKERS, contention_scale=math.inf)
    tool = model.make_tool()
    work = Job(hold)

    async def handler() -> str:
        return await tool(work)

    if warm:
        rng = random.Random("zoo:cold:warm-up")
        async with anyio.create_task_group() as tg:
            start = anyio.current_time()
            for t in poisson_arrivals(0.5 * COLD_WORKERS / hold, start, 2.0, rng):
                await anyio.sleep_until(t)
                tg.start_soon(guard.call, _TOOL, handler)
        await anyio.sleep(1.0)
    began = anyio.current_time()
    done = began

    async def caller(index: int) -> None:
        nonlocal done
        await anyio.sleep(index * gap)
        while True:
            response = await guard.call(_TOOL, handler)
            if not response.is_error:
                done = max(done, anyio.current_time())
                return
            facts = response.facts or {}
            advice = facts.get("retry_after")
            if response.code != "SERVER_BUSY" or advice is None:
                raise AssertionError(f"a refusal without retry_after: {response.text}")
            await anyio.sleep(float(advice))

    async with anyio.create_task_group() as tg:
        for index in range(calls):
            tg.start_soon(caller, index)
    return done - began


async def run_cold_burst() -> ColdBurstResult:
    ideal = COLD_CALLS * COLD_HOLD_S / COLD_WORKERS
    done: dict[str, dict[str, float]] = {}
    for label, max_active in (("default", None), (f"max_active={COLD_WORKERS}", COLD_WORKERS)):
        done[label] = {
            state: round(await cold_burst(max_active, warm=state == "warm") / ideal, 3)
            for state in ("cold", "warm")
        }
    return ColdBurstResult(COLD_CALLS, COLD_WORKERS, COLD_HOLD_S, COLD_GAP_S, ideal, done)


ERRORS_SHARE, ERRORS_LOAD = 0.2, 0.5
ERRORS_MODEL = QueueingPool()
TIGHT_MODEL = HeavyTail(workers=2, mean_s=0.020, sigma=1.0)
"""The demo's tool (2 workers, 20 ms, sigma 1) for the ``tight`` cell at 0.8x."""
TIGHT_LOAD = 0.8


async def run_zoo(
    scenario: ZooScenario, *, progress: Callable[[str], None] | None = None
) -> ZooResult:
    """Every model of ``scenario`` at each of its loads, then the special cells; ``progress``
    hears what runs next."""
    from ._zoo_models import model_named

    def tell(what: str) -> None:
        if progress is not None:
            progress(what)

    models = [model_named(name) for name in scenario.models]
    cells = []
    for model in models:
        for load in scenario.loads_of(model.name):
            tell(f"{model.name} at {load:g}x")
            cells.append(await run_cell(model, load, scenario.seed))
    outage: OutageResult | None = None
    drops: tuple[DropResult, ...] = ()
    cold: ColdBurstResult | None = None
    if scenario.special:
        tell(f"{ERRORS_MODEL.name} with {ERRORS_SHARE:.0%} bad input at {ERRORS_LOAD:g}x")
        cells.append(
            await run_cell(
                ERRORS_MODEL,
                ERRORS_LOAD,
                scenario.seed,
                ("none", "oracle", "fixed10", "auto"),
                bad_share=ERRORS_SHARE,
                variant="errors20",
            )
        )
        tell(f"{TIGHT_MODEL.name}, 2 workers, max_active=2, a tight queue, at {TIGHT_LOAD:g}x")
        cells.append(
            await run_cell(
                TIGHT_MODEL,
                TIGHT_LOAD,
                scenario.seed,
                ("none", "oracle", "oracle_tight", "auto"),
                variant="tight",
            )
        )
        tell("a backend down for 10 s")
        outage = await run_outage(scenario.seed)
        tell("a capacity drop 8 -> 1 (sigma 0.7 and 1.0)")
        drops = (await run_drop(0.7, scenario.seed), await run_drop(1.0, scenario.seed))
        tell("a cold burst")
        cold = await run_cold_burst()
    described = {m.name: describe(m) for m in models}
    if scenario.special:
        described[f"{ERRORS_MODEL.name}+errors20"] = describe(ERRORS_MODEL)
        described[f"{TIGHT_MODEL.name}+tight"] = describe(TIGHT_MODEL)
    return ZooResult(
        scenario,
        tuple(cells),
        outage,
        drops,
        cold,
        models=described,
    )
