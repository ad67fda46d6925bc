"""The priorities scenario: interactive and background agents through one tool, priority-blind
against priority-aware, at several multiples of the tool's capacity (docs/priorities.md).

The tool is the demo's model with 4 workers (20 ms log-normal service, sigma 1: capacity about
200 calls/s) behind ``Guard()`` at its defaults (``max_active="auto"``). Interactive calls come
from three clients, background calls from two whose demands are 10:1; arrivals are open-loop
Poisson, drawn once per seed and load, and the blind guard and the aware one receive the very
same arrivals and the same tool model, side by side in one event loop. Aware: the background
clients' calls carry ``priority="background"``; blind: no call carries a priority. Clients give
up after 10 s.

The guards run on the event loop's clock (``anyio.current_time``): ``fusion-guard demo`` runs the
scenario in virtual time (``_virtual_time``), ``benchmarks/priorities.py`` on trio's mock clock.
Figures over ``duration_s`` after a ``warmup_s`` warm-up: interactive calls answered OK,
interactive p99 over the tool's uncontended p99, each class's goodput as a share of the capacity
the workers really had, and each background client's goodput over a max-min fair share of what
background received.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio

from .._exceptions import ServerBusy
from ._loadgen import CallRecord, Outcome, drive_tool, percentile, poisson_arrivals
from ._tool import SimulatedTool, ToolModel

__all__ = [
    "ALONE",
    "BACKGROUND",
    "INTERACTIVE",
    "PRIORITY_MODES",
    "CallTrace",
    "LoadResult",
    "ModeFigures",
    "PrioritiesResult",
    "PrioritiesScenario",
    "run_priorities",
    "run_priorities_load",
]

INTERACTIVE = ("chat-1", "chat-2", "chat-3")
#: The background clients and their relative demands (10:1).
BACKGROUND = {"batch-big": 10.0, "batch-small": 1.0}
PRIORITY_MODES = ("blind", "aware")
#: The control: the same interactive arrivals through ``Guard()`` with no background call at
#: all, run after the two guards on the same tool model and service seed. Its p99 is what the
#: interactive calls would have with background gone; above the issue's loads the aware guard's
#: is judged against it (``_priorities_report.p99_bound``).
ALONE = "alone"
_TOOL = "demo.priorities_tool"


@dataclass(frozen=True, kw_only=True)
class PrioritiesScenario:
    loads: tuple[float, ...] = (1.0, 2.0, 3.0, 4.0)
    """Offered loads, as multiples of the tool's capacity."""
    interactive: float = 0.2
    """The interactive clients' share of the calls."""
    warmup_s: float = 5.0
    duration_s: float = 20.0
    client_timeout_s: float = 10.0
    model: ToolModel = field(default_factory=lambda: ToolModel(workers=4))
    priority_share: float | None = None
    """The guards' ``priority_share`` (None: the default)."""
    max_active: int | None = None
    """The guards' fixed ``max_active`` (None: the default, ``auto``)."""
    seed: int = 1
    service_seed: int | None = None
    """Seeds the tool's service times apart from the arrivals (None: ``seed``): the same
    arrivals with other draws."""

    def demand(self, load: float) -> dict[str, float]:
        """Each client's offered load, as a multiple of capacity."""
        demand = {name: load * self.interactive / len(INTERACTIVE) for name in INTERACTIVE}
        weights = sum(BACKGROUND.values())
        return demand | {
            name: load * (1 - self.interactive) * w / weights for name, w in BACKGROUND.items()
        }


@dataclass(frozen=True, kw_only=True)
class ModeFigures:
    interactive_ok: float
    """The interactive calls (sent in the window) answered OK."""
    interactive_p99_x: float | None
    """Their p99 over the tool's uncontended p99 (None: none answered)."""
    interactive_goodput: float
    background_goodput: float
    total_goodput: float
    """OK answers in the window over the calls the workers could really serve there."""
    background_fair_ratio: dict[str, float | None]
    """Each background client's goodput over its max-min fair share of background's."""


@dataclass(frozen=True, slots=True)
class CallTrace:
    """Where one answered call's time went (``run_priorities_load``'s ``trace``): when it was
    sent, given a slot by the guard, given a worker by the tool, and answered."""

    mode: str
    client: str
    sent: float
    admitted: float
    worker: float
    done: float


@dataclass(frozen=True)
class LoadResult:
    load: float
    modes: dict[str, ModeFigures]


@dataclass(frozen=True)
class PrioritiesResult:
    scenario: PrioritiesScenario
    loads: tuple[LoadResult, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "scenario": asdict(self.scenario),
            "loads": [
                {"load": r.load, **{m: asdict(f) for m, f in r.modes.items()}} for r in self.loads
            ],
        }


async def run_priorities(
    scenario: PrioritiesScenario, *, progress: Callable[[float], None] | None = None
) -> PrioritiesResult:
    """Each load of ``scenario`` in turn (``progress(load)`` before each), blind and aware side
    by side on the same arrivals."""
    results = []
    for load in scenario.loads:
        if progress is not None:
            progress(load)
        results.append(await run_priorities_load(scenario, load))
    return PrioritiesResult(scenario, tuple(results))


async def run_priorities_load(
    scenario: PrioritiesScenario, load: float, *, trace: list[CallTrace] | None = None
) -> LoadResult:
    """One load: the blind and the aware guard on the very same arrivals, then the control
    (``ALONE``) on the interactive ones alone; ``trace``: where each answered call's time went
    is appended to it (``benchmarks/priorities.py --breakdown``)."""
    # One after the other: run side by side, the control's tasks would change the order in
    # which trio runs the others' ready tasks, and so the two guards' figures.
    modes = await _run_modes(scenario, load, PRIORITY_MODES, scenario.demand(load), trace)
    interactive_only = {n: d for n, d in scenario.demand(load).items() if n in INTERACTIVE}
    control = await _run_modes(scenario, load, (ALONE,), interactive_only, trace)
    return LoadResult(load, modes | control)


async def _run_modes(
    scenario: PrioritiesScenario,
    load: float,
    modes: tuple[str, ...],
    demand: dict[str, float],
    trace: list[CallTrace] | None,
) -> dict[str, ModeFigures]:
    """``modes``' guards side by side, each on its own tool, on the same arrivals of the
    clients of ``demand`` (begun now); the figures of each."""
    from .._guard import Guard

    seed, model = scenario.seed, scenario.model
    begin = anyio.current_time()
    start = begin + scenario.warmup_s
    end = start + scenario.duration_s
    arrivals = {
        name: poisson_arrivals(
            share * model.capacity_rps, begin, end - begin, random.Random(f"{seed}:prio:{name}")
        )
        for name, share in demand.items()
    }
    drawn = seed if scenario.service_seed is None else scenario.service_seed
    tools = {m: SimulatedTool(model, random.Random(f"{drawn}:prio:service")) for m in modes}
    # On the loop's clock: in virtual time when the loop's time is virtual.
    settings: dict[str, Any] = {}
    if scenario.priority_share is not None:
        settings["priority_share"] = scenario.priority_share
    if scenario.max_active is not None:
        settings["max_active"] = scenario.max_active
    guards = {m: Guard(metrics=False, clock=anyio.current_time, **settings) for m in modes}
    records: dict[tuple[str, str], list[CallRecord]] = {
        (m, name): [] for m in modes for name in demand
    }

    def through(mode: str, client: str) -> Callable[[SimulatedTool], Any]:
        priority = "background" if mode == "aware" and client in BACKGROUND else None

        async def call(tool: SimulatedTool) -> Outcome:
            sent = anyio.current_time()
            try:
                async with guards[mode].admit(_TOOL, client=client, priority=priority):
                    admitted = anyio.current_time()
                    await tool()
                    if trace is not None:  # the tool's last service ended just now: this one's
                        worker = tool.worker_time.draws[-1][0]
                        done = anyio.current_time()
                        trace.append(CallTrace(mode, client, sent, admitted, worker, done))
            except ServerBusy:
                return "shed"
            return "ok"

        return call

    async with anyio.create_task_group() as tg:
        for mode, name in records:
            tg.start_soon(
                functools.partial(
                    drive_tool,
                    arrivals[name],
                    through(mode, name),
                    tools[mode],
                    client_timeout=scenario.client_timeout_s,
                    records=records[mode, name],
                )
            )
    return {
        mode: _figures(
            {name: records[mode, name] for name in demand},
            demand,
            tools[mode].realised_capacity(start, end) * scenario.duration_s,
            model,
            start,
            end,
        )
        for mode in modes
    }


def _figures(
    records: dict[str, list[CallRecord]],
    demand: dict[str, float],
    capacity_calls: float,
    model: ToolModel,
    start: float,
    end: float,
) -> ModeFigures:
    served = {
        name: sum(1 for r in rs if r.outcome == "ok" and start <= r.intended + r.latency < end)
        / capacity_calls
        for name, rs in records.items()
    }
    inside = [r for n in INTERACTIVE for r in records[n] if start <= r.intended < end]
    ok = sum(r.outcome == "ok" for r in inside) / max(1, len(inside))
    p99 = percentile([r.latency for r in inside if r.outcome == "ok"], 0.99)
    inter = sum(served[n] for n in INTERACTIVE)
    back = sum(served.get(n, 0.0) for n in BACKGROUND)
    if not set(BACKGROUND) <= set(records):  # the control: no background client at all
        fair: dict[str, float] = dict.fromkeys(BACKGROUND, 0.0)
    else:
        # Max-min fair split of what background received, between its two clients, on what
        # the smaller one really asked for in the window: on its mean demand, a client whose
        # every call was answered read as 0.89 of its share on a seed whose Poisson draws sent
        # it fewer calls.
        small = min(BACKGROUND, key=demand.__getitem__)
        big = max(BACKGROUND, key=demand.__getitem__)
        asked = sum(1 for r in records[small] if start <= r.intended < end) / capacity_calls
        fair_small = min(asked, back / 2)
        fair = {small: fair_small, big: back - fair_small}
    return ModeFigures(
        interactive_ok=round(ok, 4),
        interactive_p99_x=None if p99 is None else round(p99 / model.uncontended_p99_s, 3),
        interactive_goodput=round(inter, 4),
        background_goodput=round(back, 4),
        total_goodput=round(inter + back, 4),
        background_fair_ratio={
            n: round(served[n] / fair[n], 3) if fair[n] else None for n in BACKGROUND
        },
    )
