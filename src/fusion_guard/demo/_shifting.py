"""The shifting scenario: one tool whose hidden worker pool changes during the run.

The pool goes through ``workers`` (2 -> 8 -> 1 -> 4 by default), ``phase_s`` seconds each; calls
beyond the workers queue inside the tool and slow every service down (as a crowded database
does). Arrivals are Poisson at ``load`` times the *current* capacity. Three limits receive the
very same arrivals, each call with the same service time under every limit, side by side in one
event loop:

* ``fixed``: a limit that is too high, 10 (the Guard's default ``max_active`` before ``auto``);
* ``oracle``: a limit always equal to the true worker count (set at each change: what an
  operator who knew the pool at every moment would configure);
* ``auto``: ``Guard(max_active="auto")``, which must find the count from latency alone.

Goodput is measured in each phase from ``settle_s`` after the change to the phase's end, and the
limit in force is sampled throughout, for the table and the chart.
"""

from __future__ import annotations

import functools
import math
import random
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field

import anyio

from .._exceptions import ServerBusy
from ..admission._concurrency import ConcurrencyGuard
from ..wire._response import ToolResponse
from ._loadgen import CallRecord, Outcome, drive_calls, poisson_arrivals
from ._tool import WorkerTime

__all__ = [
    "SHIFTING_POLICIES",
    "PhaseResult",
    "ShiftingResult",
    "ShiftingScenario",
    "run_shifting",
]

SHIFTING_POLICIES = ("fixed", "oracle", "auto")
_TOOL = "demo.shifting_tool"
#: How often the limits in force are sampled for the chart and the settling times (seconds).
_SAMPLE_S = 0.05


@dataclass(frozen=True, kw_only=True)
class ShiftingScenario:
    workers: tuple[int, ...] = (2, 8, 1, 4)
    """The hidden pool's size in each phase."""
    phase_s: float = 6.0
    settle_s: float = 3.0
    """Goodput is measured from this long after each change."""
    load: float = 1.5
    """Offered load, as a multiple of the current capacity."""
    mean_service_s: float = 0.020
    sigma: float = 1.0
    contention_scale: float = 100.0
    """Each call piled up beyond the workers slows every service by 1/contention_scale."""
    fixed_limit: int = 10
    slo_s: float = 0.2
    client_timeout_s: float = 1.0
    seed: int = 1

    @property
    def mu(self) -> float:
        return math.log(self.mean_service_s) - self.sigma**2 / 2

    def capacity_rps(self, workers: int) -> float:
        return workers / self.mean_service_s

    @property
    def duration_s(self) -> float:
        return self.phase_s * len(self.workers)


@dataclass(frozen=True, kw_only=True)
class PhaseResult:
    policy: str
    phase: int
    workers: int
    goodput_slo: float
    """OK answers within the SLO per second, over the capacity the workers really had."""
    goodput: float
    shed_rate: float
    p99_ms: float | None
    mean_limit: float
    """The limit in force, averaged over the measured part of the phase."""
    reached_s: float | None
    """Seconds from the change until the limit first came within [0.5x, 2x] of the true count
    (None: never in this phase): the target's measure, as in ``benchmarks/limit_sim.py``."""
    settle_s: float | None
    """Seconds from the change until the limit stayed within [0.5x, 2x] of the true count for
    the rest of the phase (None: it did not): stricter than the target."""


@dataclass(frozen=True)
class ShiftingResult:
    scenario: ShiftingScenario
    phases: tuple[PhaseResult, ...]
    limits: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    """Per policy, (seconds since the start, limit in force), every 50 ms."""

    def phase(self, policy: str, index: int) -> PhaseResult:
        return next(r for r in self.phases if r.policy == policy and r.phase == index)

    def to_json(self) -> dict[str, object]:
        return {
            "scenario": asdict(self.scenario),
            "phases": [asdict(r) for r in self.phases],
            "limits": {
                name: [list(point) for point in points] for name, points in self.limits.items()
            },
        }


class _Pool:
    """A worker pool that can be resized while calls wait (FIFO): a grown pool serves waiters
    at once, a shrunk one lets its running calls finish."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.busy = 0
        self._waiting: deque[anyio.Event] = deque()

    async def acquire(self) -> None:
        if self.busy < self.workers and not self._waiting:
            self.busy += 1
            return
        granted = anyio.Event()
        self._waiting.append(granted)
        try:
            await granted.wait()
        except BaseException:
            if granted.is_set():  # handed a worker at the moment of cancellation
                self.release()
            else:
                self._waiting.remove(granted)
            raise

    def release(self) -> None:
        self.busy -= 1
        self._serve()

    def resize(self, workers: int) -> None:
        self.workers = workers
        self._serve()

    def _serve(self) -> None:
        while self._waiting and self.busy < self.workers:
            self.busy += 1
            self._waiting.popleft().set()


class _ShiftingTool:
    """``await tool.for_arrival(k)()`` holds one worker of the current pool for the k-th
    arrival's log-normal service time, slowed by the calls piled up inside; records what each
    worker really spent, per phase."""

    def __init__(self, scenario: ShiftingScenario, services: Sequence[float]) -> None:
        self._scenario = scenario
        self._services = services
        self.pool = _Pool(scenario.workers[0])
        self.work = WorkerTime()
        self.inside = 0

    def for_arrival(self, index: int) -> Callable[[], Awaitable[str]]:
        return functools.partial(self._serve, self._services[index])

    async def _serve(self, service: float) -> str:
        self.inside += 1
        try:
            await self.pool.acquire()
            try:
                piled_up = max(0, self.inside - self.pool.workers)
                await self.work.serve(service, piled_up, self._scenario.contention_scale)
            finally:
                self.pool.release()
        finally:
            self.inside -= 1
        return "ok"

    def realised_capacity(self, start: float, end: float, workers: int) -> float:
        return self.work.realised_capacity(
            start, end, workers, self._scenario.capacity_rps(workers)
        )


class _OracleLimit:
    """A ``Limit`` set from outside to the true worker count at each change."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def on_sample(self, start: float, duration: float, inflight: int, dropped: bool) -> None:
        pass


_Call = Callable[[], Awaitable[str]]
_Policy = Callable[[_Call], Awaitable[Outcome]]


def _outcome(response: ToolResponse) -> Outcome:
    if not response.is_error:
        return "ok"
    return "shed" if response.code == "SERVER_BUSY" else "error"


def _policies(
    scenario: ShiftingScenario, oracle: _OracleLimit
) -> dict[str, tuple[_Policy, Callable[[], int]]]:
    """Per policy: how a call goes through it, and how to read its limit in force."""
    from .._guard import Guard

    guards = {
        "fixed": Guard(max_active=scenario.fixed_limit),
        "auto": Guard(max_active="auto"),
    }
    # The oracle's slots with the Guard's own queue settings (a Guard takes numbers or "auto").
    model = guards["fixed"].limits(_TOOL)
    oracle_slots = ConcurrencyGuard(
        limit=oracle,
        max_queue=10 * scenario.workers[0],
        queue_timeout=math.inf if model.queue_timeout is None else model.queue_timeout,
        name=_TOOL,
    )

    def through_guard(guard: Guard) -> _Policy:
        async def call(tool: _Call) -> Outcome:
            return _outcome(await guard.call(_TOOL, tool))

        return call

    async def through_oracle(tool: _Call) -> Outcome:
        try:
            async with oracle_slots.slot():
                await tool()
        except ServerBusy:
            return "shed"
        return "ok"

    def limit_of(guard: Guard) -> Callable[[], int]:
        slots = guard.concurrency(_TOOL)
        assert slots is not None
        return lambda: slots.limit

    return {
        "fixed": (through_guard(guards["fixed"]), limit_of(guards["fixed"])),
        "oracle": (through_oracle, lambda: oracle_slots.limit),
        "auto": (through_guard(guards["auto"]), limit_of(guards["auto"])),
    }


async def run_shifting(
    scenario: ShiftingScenario, *, progress: Callable[[int, int], None] | None = None
) -> ShiftingResult:
    """Run the three policies side by side over every phase; ``progress(phase, phases)`` is
    called at each change."""
    rng = random.Random(f"{scenario.seed}:shifting:arrivals")
    begin = anyio.current_time()
    arrivals: list[float] = []
    for index, workers in enumerate(scenario.workers):
        rate = scenario.load * scenario.capacity_rps(workers)
        arrivals += poisson_arrivals(rate, begin + index * scenario.phase_s, scenario.phase_s, rng)
    # Each arrival's service time is drawn once, and every policy serves that call for it: the
    # policies then differ by what they admit and when, not by which slow calls fell to whom.
    # Drawn at each service start instead (the k-th call served got the k-th draw), the oracle
    # run against itself with other draws varied by as much as the target's margin.
    service_rng = random.Random(f"{scenario.seed}:shifting:service")
    services = [service_rng.lognormvariate(scenario.mu, scenario.sigma) for _ in arrivals]
    tools = {name: _ShiftingTool(scenario, services) for name in SHIFTING_POLICIES}
    oracle = _OracleLimit(scenario.workers[0])
    policies = _policies(scenario, oracle)
    records: dict[str, list[CallRecord]] = {name: [] for name in SHIFTING_POLICIES}
    limits: dict[str, list[tuple[float, int]]] = {name: [] for name in SHIFTING_POLICIES}
    end = begin + scenario.duration_s

    async def shift() -> None:
        for index, workers in enumerate(scenario.workers):
            await anyio.sleep_until(begin + index * scenario.phase_s)
            if progress is not None:
                progress(index, len(scenario.workers))
            oracle.limit = workers
            for tool in tools.values():
                tool.pool.resize(workers)

    async def sample() -> None:
        while anyio.current_time() < end:
            at = round(anyio.current_time() - begin, 3)
            for name, (_, limit_of) in policies.items():
                limits[name].append((at, limit_of()))
            await anyio.sleep(_SAMPLE_S)

    async with anyio.create_task_group() as tg:
        tg.start_soon(shift)
        tg.start_soon(sample)
        for name in SHIFTING_POLICIES:
            call, _ = policies[name]
            tg.start_soon(
                functools.partial(
                    drive_calls,
                    arrivals,
                    call,
                    tools[name].for_arrival,
                    client_timeout=scenario.client_timeout_s,
                    records=records[name],
                )
            )
    phases = [
        _summarise(name, index, scenario, begin, records[name], limits[name], tools[name])
        for name in SHIFTING_POLICIES
        for index in range(len(scenario.workers))
    ]
    return ShiftingResult(scenario, tuple(phases), limits)


def _summarise(
    policy: str,
    index: int,
    scenario: ShiftingScenario,
    begin: float,
    records: Sequence[CallRecord],
    limits: Sequence[tuple[float, int]],
    tool: _ShiftingTool,
) -> PhaseResult:
    workers = scenario.workers[index]
    change = begin + index * scenario.phase_s
    start, end = change + scenario.settle_s, change + scenario.phase_s
    capacity_calls = tool.realised_capacity(start, end, workers) * (end - start)
    oks = [
        r.latency for r in records if r.outcome == "ok" and start <= r.intended + r.latency < end
    ]
    inside = [r for r in records if start <= r.intended < end]
    served = sorted(r.latency for r in inside if r.outcome != "shed")
    in_phase = [
        limit
        for at, limit in limits
        if scenario.settle_s <= at - index * scenario.phase_s < scenario.phase_s
    ]
    return PhaseResult(
        policy=policy,
        phase=index,
        workers=workers,
        goodput_slo=round(sum(1 for x in oks if x <= scenario.slo_s) / capacity_calls, 4),
        goodput=round(len(oks) / capacity_calls, 4),
        shed_rate=round(sum(r.outcome == "shed" for r in inside) / max(1, len(inside)), 4),
        p99_ms=(
            round(served[max(0, math.ceil(0.99 * len(served)) - 1)] * 1000.0, 1) if served else None
        ),
        mean_limit=round(sum(in_phase) / len(in_phase), 2) if in_phase else float("nan"),
        reached_s=_settle(limits, index, scenario, workers, stay=False),
        settle_s=_settle(limits, index, scenario, workers, stay=True),
    )


def _settle(
    limits: Sequence[tuple[float, int]],
    index: int,
    scenario: ShiftingScenario,
    workers: int,
    *,
    stay: bool,
) -> float | None:
    """Seconds from the change to the first sample with the limit within [0.5x, 2x] of
    ``workers`` (``stay``: after which it stayed there for the rest of the phase)."""
    change = index * scenario.phase_s
    settled: float | None = None
    for at, limit in limits:
        if not change <= at < change + scenario.phase_s:
            continue
        if 0.5 * workers <= limit <= 2 * workers:
            if settled is None:
                settled = at - change
                if not stay:
                    break
        else:
            settled = None
    return None if settled is None else round(settled, 2)
