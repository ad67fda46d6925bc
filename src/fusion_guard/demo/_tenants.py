"""The tenants scenario: clients of different appetite sharing one tool, with fair queueing on
and off.

The tool is the overload demo's (2 hidden workers, log-normal 20 ms service: capacity about
100 calls/s) behind ``Guard(max_active=2)``, every other setting at its default; each client
passes its own key (``guard.admit(tool, client=key)``). Two parts:

* ``pair``: a greedy client offering 8x the capacity and a polite one offering 0.25x;
* ``crowd``: ``clients`` clients whose appetites are spread geometrically between 1.5x and 16x
  their fair share (capacity / clients), so that every one of them asks for more than it can get.

Arrivals are open-loop Poisson per client, drawn once per seed; the guard with fair queueing and
the guard without it receive the very same arrivals and service-time draws, side by side in one
event loop. Clients cancel a call after ``client_timeout_s``, as MCP clients do. Figures are taken
over ``duration_s`` after a ``warmup_s`` in which the queue fills and the guard sees the overload.
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Literal

import anyio

from .._exceptions import ServerBusy
from ._loadgen import CallRecord, Outcome, drive_tool, percentile, poisson_arrivals
from ._tool import SimulatedTool, ToolModel

if TYPE_CHECKING:
    from .._guard import Guard

__all__ = [
    "GREEDY",
    "POLITE",
    "TENANTS_PARTS",
    "ClientResult",
    "Part",
    "TenantsResult",
    "TenantsRun",
    "TenantsScenario",
    "crowd_appetites",
    "jain_index",
    "run_tenants",
]

Part = Literal["pair", "crowd"]
TENANTS_PARTS: tuple[Part, ...] = ("pair", "crowd")
GREEDY = "greedy"
POLITE = "polite"
_TOOL = "demo.shared_tool"


@dataclass(frozen=True, kw_only=True)
class TenantsScenario:
    model: ToolModel = field(default_factory=ToolModel)
    max_active: int = 2
    greedy_load: float = 8.0
    """The greedy client's offered load, as a multiple of the tool's capacity."""
    polite_load: float = 0.25
    clients: int = 100
    """How many clients make up the crowd."""
    crowd_appetite: tuple[float, float] = (1.5, 16.0)
    """The crowd's least and greatest appetite, as multiples of a fair share."""
    warmup_s: float = 1.0
    duration_s: float = 8.0
    client_timeout_s: float = 1.0
    seed: int = 1

    @property
    def fair_share_rps(self) -> float:
        """One crowd client's fair share of the capacity (calls/s)."""
        return self.model.capacity_rps / self.clients


@dataclass(frozen=True, kw_only=True)
class ClientResult:
    client: str
    appetite: float
    """Offered calls/s over the tool's capacity."""
    calls: int
    """Calls meant to be sent in the measured window."""
    ok: int
    refused: dict[str, int]
    """SERVER_BUSY answers by reason (``queue_full``, ``fair_share`` ...)."""
    timeouts: int
    """Calls the client gave up on (cancelled at the client timeout)."""
    served: float
    """OK answers delivered in the window, per second, over the capacity."""
    p99_ms: float | None
    """p99 latency of the calls not refused (a call given up on counts at the timeout)."""

    @property
    def ok_rate(self) -> float:
        return self.ok / self.calls if self.calls else 0.0


@dataclass(frozen=True, kw_only=True)
class TenantsRun:
    part: Part
    fair_queueing: bool
    capacity_rps: float
    """The capacity goodput is divided by (see ``SimulatedTool.realised_capacity``)."""
    goodput: float
    """All clients' OK answers delivered in the window, per second, over the capacity."""
    clients: tuple[ClientResult, ...]

    def client(self, name: str) -> ClientResult:
        return next(c for c in self.clients if c.client == name)

    @property
    def jain(self) -> float:
        """Jain's fairness index of the clients' served shares."""
        return jain_index([c.served for c in self.clients])

    def to_json(self) -> dict[str, object]:
        figures = asdict(self)
        figures["jain"] = round(self.jain, 4)
        for client, row in zip(self.clients, figures["clients"], strict=True):
            row["ok_rate"] = round(client.ok_rate, 4)
        return figures


@dataclass(frozen=True)
class TenantsResult:
    scenario: TenantsScenario
    runs: tuple[TenantsRun, ...]

    def run(self, part: Part, fair_queueing: bool) -> TenantsRun:
        return next(r for r in self.runs if r.part == part and r.fair_queueing == fair_queueing)

    @property
    def parts(self) -> tuple[Part, ...]:
        return tuple(dict.fromkeys(r.part for r in self.runs))

    def to_json(self) -> dict[str, object]:
        return {
            "scenario": asdict(self.scenario),
            "capacity_rps": self.scenario.model.capacity_rps,
            "uncontended_p99_ms": round(self.scenario.model.uncontended_p99_s * 1000.0, 3),
            "runs": [r.to_json() for r in self.runs],
        }


def jain_index(shares: Sequence[float]) -> float:
    """(sum x)^2 / (n * sum x^2): 1 when every share is equal, 1/n when one takes all."""
    squares = sum(x * x for x in shares)
    return sum(shares) ** 2 / (len(shares) * squares) if squares else 1.0


def crowd_appetites(scenario: TenantsScenario) -> dict[str, float]:
    """Each crowd client's offered load (x capacity), spread geometrically over the range."""
    low, high = scenario.crowd_appetite
    n = scenario.clients
    share = 1.0 / n
    return {f"client-{i:03d}": share * low * (high / low) ** (i / max(1, n - 1)) for i in range(n)}


def _appetites(part: Part, scenario: TenantsScenario) -> dict[str, float]:
    if part == "pair":
        return {GREEDY: scenario.greedy_load, POLITE: scenario.polite_load}
    return crowd_appetites(scenario)


def _through(
    guard: Guard, client: str, reasons: list[str]
) -> Callable[[SimulatedTool], Awaitable[Outcome]]:
    """A call of ``client`` through ``guard``; each refusal's reason appended to ``reasons``."""

    async def call(tool: SimulatedTool) -> Outcome:
        try:
            async with guard.admit(_TOOL, client=client):
                await tool()
        except ServerBusy as busy:
            reasons.append(busy.reason)
            return "shed"
        return "ok"

    return call


async def run_tenants(
    scenario: TenantsScenario,
    parts: Sequence[Part] = TENANTS_PARTS,
    *,
    progress: Callable[[Part], None] | None = None,
) -> TenantsResult:
    """Run each part with fair queueing on and off; ``progress(part)`` is called as each starts."""
    runs: list[TenantsRun] = []
    for part in parts:
        if progress is not None:
            progress(part)
        runs += await _run_part(part, scenario)
    return TenantsResult(scenario, tuple(runs))


async def _run_part(part: Part, scenario: TenantsScenario) -> list[TenantsRun]:
    from .._guard import Guard

    appetites = _appetites(part, scenario)
    capacity = scenario.model.capacity_rps
    begin = anyio.current_time()
    window = (begin + scenario.warmup_s, begin + scenario.warmup_s + scenario.duration_s)
    arrivals = {
        client: poisson_arrivals(
            load * capacity,
            begin,
            window[1] - begin,
            random.Random(f"{scenario.seed}:tenants:{part}:{client}"),
        )
        for client, load in appetites.items()
    }
    modes = (True, False)
    tools = {
        fair: SimulatedTool(
            scenario.model, random.Random(f"{scenario.seed}:tenants:{part}:service")
        )
        for fair in modes
    }
    guards = {fair: Guard(max_active=scenario.max_active, fair_queueing=fair) for fair in modes}
    records: dict[tuple[bool, str], list[CallRecord]] = {
        (fair, client): [] for fair in modes for client in appetites
    }
    reasons: dict[tuple[bool, str], list[str]] = {key: [] for key in records}
    async with anyio.create_task_group() as tg:
        for fair, client in records:
            tg.start_soon(
                functools.partial(
                    drive_tool,
                    arrivals[client],
                    _through(guards[fair], client, reasons[fair, client]),
                    tools[fair],
                    client_timeout=scenario.client_timeout_s,
                    records=records[fair, client],
                )
            )
    return [
        _summarise(
            part,
            fair,
            appetites,
            {client: (records[fair, client], reasons[fair, client]) for client in appetites},
            tools[fair],
            window,
        )
        for fair in modes
    ]


def _summarise(
    part: Part,
    fair: bool,
    appetites: dict[str, float],
    calls: dict[str, tuple[list[CallRecord], list[str]]],
    tool: SimulatedTool,
    window: tuple[float, float],
) -> TenantsRun:
    start, end = window
    capacity = tool.realised_capacity(start, end)
    capacity_calls = capacity * (end - start)
    clients: list[ClientResult] = []
    delivered_total = 0
    for client, appetite in appetites.items():
        records, reasons = calls[client]
        # A refused call's record is appended as its refusal is answered, with no await in
        # between: the n-th "shed" record is the n-th reason.
        shed_at = [i for i, r in enumerate(records) if r.outcome == "shed"]
        reason_of = dict(zip(shed_at, reasons, strict=True))
        inside = [(i, r) for i, r in enumerate(records) if start <= r.intended < end]
        delivered = sum(
            1 for r in records if r.outcome == "ok" and start <= r.intended + r.latency < end
        )
        delivered_total += delivered
        p99 = percentile([r.latency for _, r in inside if r.outcome != "shed"], 0.99)
        clients.append(
            ClientResult(
                client=client,
                appetite=round(appetite, 4),
                calls=len(inside),
                ok=sum(r.outcome == "ok" for _, r in inside),
                refused=dict(Counter(reason_of[i] for i, r in inside if r.outcome == "shed")),
                timeouts=sum(r.outcome == "timeout" for _, r in inside),
                served=round(delivered / capacity_calls, 4),
                p99_ms=None if p99 is None else round(p99 * 1000.0, 1),
            )
        )
    return TenantsRun(
        part=part,
        fair_queueing=fair,
        capacity_rps=round(capacity, 2),
        goodput=round(delivered_total / capacity_calls, 4),
        clients=tuple(clients),
    )
