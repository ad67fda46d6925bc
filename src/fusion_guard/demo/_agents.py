"""The agents scenario: a fleet of closed-loop agents calling one guarded tool through the MCP
SDK's real client, each retry policy on the same seed.

Each agent works through tasks of ``calls_per_task`` tool calls: it thinks (an exponential time,
``think_s`` on average) before each call, gives each logical call ``deadline_s`` (its attempts
and waits included), and abandons the task when a call fails. The fleet grows and shrinks with
the phases of ``PHASES``; its size is the load it would offer if every call were answered at
once (``agents = load x capacity x think_s``), so a fleet that waits offers less.

The server is an MCP SDK low-level ``Server`` in the same process, reached through
``mcp.Client``'s in-memory transport. Its one tool holds one of ``slots`` workers for a uniform
time around ``mean_service_s`` (twice that while the capacity is halved), behind the library's
``ConcurrencyGuard`` with a short queue; a refusal is sent as the adapters send it (the envelope,
with its facts in ``_meta``). The guard reads the event loop's clock (``anyio.current_time``),
as every part of the scenario does, so the whole scenario runs in virtual time under a test
clock (the ``Guard`` facade reads ``time.monotonic`` and could not).

The policies, each with a server and a client of its own, run side by side in one event loop:

* ``no retry``: one attempt;
* ``naive``: three attempts 10 ms apart, whatever the server says (the hand-written loop);
* ``backoff``: up to five attempts, waits drawn from 0 to 0.1 s x 2^(retry - 1), at most 2 s
  ("full jitter", as tenacity's ``wait_random_exponential``), deaf to the advice, never past the
  deadline;
* ``helper``: ``fusion_guard.client``'s ``RetryingSession`` as ``wrap`` makes it (its defaults,
  its default budget and throttle), told each call's deadline.
"""

from __future__ import annotations

import contextvars
import math
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio

from ..client import Retrying, RetryingSession, ThrottledLocally, default_budget, default_throttle

if TYPE_CHECKING:
    from mcp import Client

__all__ = [
    "AGENT_POLICIES",
    "BLIP",
    "OVERLOAD",
    "RECOVERY",
    "AgentPolicy",
    "AgentsResult",
    "AgentsScenario",
    "Phase",
    "PhaseFigures",
    "PolicyRun",
    "run_agents",
]

AgentPolicy = Literal["no retry", "naive", "backoff", "helper"]
AGENT_POLICIES: tuple[AgentPolicy, ...] = ("no retry", "naive", "backoff", "helper")
TOOL = "search"
_SERVER = "agents-demo"
OVERLOAD = "overload"
RECOVERY = "capacity back"
BLIP = "blip, 1 s"
_NAIVE_ATTEMPTS = 3
_NAIVE_DELAY_S = 0.010
_BACKOFF_ATTEMPTS = 5
_BACKOFF_BASE_S = 0.1
_BACKOFF_MAX_S = 2.0


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    load: float
    """The fleet's size as the load it would offer answered at once, x the full capacity."""
    capacity: float = 1.0
    """The share of the tool's full capacity it has (0.5: halved)."""


@dataclass(frozen=True, kw_only=True)
class AgentsScenario:
    slots: int = 4
    mean_service_s: float = 0.2
    think_s: float = 1.0
    calls_per_task: int = 4
    deadline_s: float = 5.0
    queue_timeout_s: float = 1.0
    overload_s: float = 8.0
    """The sustained overload's length; the other phases keep their proportion to it, but for
    the blip (1 s always)."""
    seed: int = 1

    @property
    def capacity_rps(self) -> float:
        return self.slots / self.mean_service_s

    @property
    def phases(self) -> tuple[Phase, ...]:
        scale = self.overload_s / 8.0
        return (
            # Fleets sized so that the calls they begin come near the loads they stand for (a
            # closed loop offers less than its size: an agent waiting for an answer sends
            # nothing): about 3x the capacity, then 2x in the blip (agents joining think first).
            Phase(OVERLOAD, self.overload_s, 3.6),
            Phase("capacity halved", 5.0 * scale, 1.5, capacity=0.5),
            Phase(RECOVERY, 4.0 * scale, 1.5),
            Phase("calm", 3.0 * scale, 0.6),
            Phase(BLIP, 1.0, 3.0),
            Phase("after the blip", 2.0 * scale, 0.6),
        )

    def agents(self, load: float) -> int:
        return round(load * self.capacity_rps * self.think_s)

    @property
    def seconds(self) -> float:
        """About how long a run lasts: the phases, then a moment for the calls in progress (a
        calm phase ends the run, so they are answered quickly)."""
        return sum(p.seconds for p in self.phases) + 1.0


@dataclass(slots=True)
class LogicalCall:
    started: float
    finished: float = math.nan
    attempts: int = 0
    ok: bool = False
    budget: bool = False
    """Sent back by the helper itself: its retry budget or its client-side throttle."""


@dataclass(frozen=True, kw_only=True)
class PhaseFigures:
    phase: str
    calls: int
    """Logical calls begun in the phase."""
    offered: float
    """Logical calls begun per second, x the full capacity."""
    attempts: int
    """Attempts those calls sent."""
    attempts_per_call: float
    retries: int
    """Attempts those calls sent after their first."""
    refusals_per_accepted: float
    """Attempts the server refused over those it accepted, sent in the phase."""
    goodput: float
    """Logical calls done OK, finished in the phase, per second."""
    within_deadline: float
    """The share of the phase's logical calls done OK within their deadline."""
    budget_refusals: int
    """The phase's logical calls the helper sent back itself, by its retry budget or its
    throttle (0 for the others)."""


@dataclass(frozen=True, kw_only=True)
class PolicyRun:
    policy: AgentPolicy
    phases: tuple[PhaseFigures, ...]
    recovery_goodput: float
    """Logical calls done OK per second in the second after the first second back at full
    capacity."""

    def phase(self, name: str) -> PhaseFigures:
        return next(p for p in self.phases if p.phase == name)


@dataclass(frozen=True)
class AgentsResult:
    scenario: AgentsScenario
    runs: tuple[PolicyRun, ...]

    def run(self, policy: AgentPolicy) -> PolicyRun:
        return next(r for r in self.runs if r.policy == policy)

    def to_json(self) -> dict[str, object]:
        from dataclasses import asdict

        return {
            "scenario": asdict(self.scenario),
            "capacity_rps": self.scenario.capacity_rps,
            "phases": [asdict(p) for p in self.scenario.phases],
            "runs": [asdict(r) for r in self.runs],
        }


@dataclass
class _Trace:
    """What one policy's run saw: the logical calls, and every attempt the server answered
    (when it arrived, whether it was accepted)."""

    calls: list[LogicalCall] = field(default_factory=list)
    attempts: list[tuple[float, bool]] = field(default_factory=list)


_current: contextvars.ContextVar[LogicalCall] = contextvars.ContextVar("agents_demo_call")


class _Counting:
    """The SDK client as the policies see it: each ``call_tool`` counts as an attempt of the
    logical call in progress (the helper's wrapper sends its attempts through it too, so an
    attempt cut short by the deadline still counts)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def call_tool(self, *args: Any, **kwargs: Any) -> Any:
        _current.get().attempts += 1
        return await self._client.call_tool(*args, **kwargs)


class _Timeline:
    def __init__(self, scenario: AgentsScenario, start: float) -> None:
        self.starts: list[float] = []
        t = start
        for phase in scenario.phases:
            self.starts.append(t)
            t += phase.seconds
        self.end = t
        self.phases = scenario.phases
        self.agents = [scenario.agents(p.load) for p in scenario.phases]

    def index(self, now: float) -> int:
        for i in range(len(self.starts) - 1, -1, -1):
            if now >= self.starts[i]:
                return i
        return 0


def _server(
    scenario: AgentsScenario, timeline: _Timeline, trace: _Trace, rng: random.Random
) -> Any:
    import mcp_types
    from mcp.server.lowlevel import Server

    from .._exceptions import ServerBusy
    from ..admission._concurrency import ConcurrencyGuard
    from ..integrations.mcp import to_call_tool_result

    slots = ConcurrencyGuard(
        scenario.slots,
        max_queue=2 * scenario.slots,
        queue_timeout=scenario.queue_timeout_s,
        name=TOOL,
        clock=anyio.current_time,
    )
    done = mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="found")])

    async def list_tools(ctx: Any, params: Any) -> Any:
        schema = {"type": "object", "properties": {}}
        return mcp_types.ListToolsResult(tools=[mcp_types.Tool(name=TOOL, input_schema=schema)])

    async def call_tool(ctx: Any, params: Any) -> Any:
        arrived = anyio.current_time()
        try:
            async with slots.slot():
                trace.attempts.append((arrived, True))
                share = timeline.phases[timeline.index(anyio.current_time())].capacity
                await anyio.sleep(scenario.mean_service_s * rng.uniform(0.5, 1.5) / share)
        except ServerBusy as busy:
            trace.attempts.append((arrived, False))
            return to_call_tool_result(busy.response)
        return done

    return Server(_SERVER, on_list_tools=list_tools, on_call_tool=call_tool)


Send = Callable[[], Awaitable[Any]]


async def _no_retry(send: Send, deadline: float, rng: random.Random) -> bool:
    return not (await send()).is_error


async def _naive(send: Send, deadline: float, rng: random.Random) -> bool:
    for attempt in range(1, _NAIVE_ATTEMPTS + 1):
        if not (await send()).is_error:
            return True
        if attempt < _NAIVE_ATTEMPTS:
            await anyio.sleep(_NAIVE_DELAY_S)
    return False


async def _backoff(send: Send, deadline: float, rng: random.Random) -> bool:
    for attempt in range(1, _BACKOFF_ATTEMPTS + 1):
        if not (await send()).is_error:
            return True
        wait = rng.uniform(0.0, min(_BACKOFF_MAX_S, _BACKOFF_BASE_S * 2.0 ** (attempt - 1)))
        if attempt == _BACKOFF_ATTEMPTS or anyio.current_time() + wait >= deadline:
            return False
        await anyio.sleep(wait)
    return False


async def _run_policy(
    policy: AgentPolicy, scenario: AgentsScenario, timeline: _Timeline, trace: _Trace
) -> None:
    from mcp import Client

    seed = scenario.seed
    server = _server(scenario, timeline, trace, random.Random(f"{seed}:agents:service"))
    async with Client(server) as client:
        counting = _Counting(client)
        policy_rng = random.Random(f"{seed}:agents:policy")
        helper = RetryingSession(
            counting,
            # As ``wrap(client)`` makes it, but for two things ``wrap`` does not take: the
            # budget and the throttle on the event loop's clock (the defaults read
            # time.monotonic, which a test clock does not move) and seeded random draws, so
            # that a seed repeats exactly.
            Retrying(
                server=_SERVER,
                budget=default_budget(clock=anyio.current_time),
                throttle=default_throttle(
                    clock=anyio.current_time, rng=random.Random(f"{seed}:agents:throttle")
                ),
                rng=random.Random(f"{seed}:agents:helper"),
            ),
        )

        async def attempt() -> Any:
            return await counting.call_tool(TOOL, {})

        async def helped(deadline: float) -> bool:
            try:
                outcome = await helper.call_tool_outcome(
                    TOOL, {}, deadline=deadline - anyio.current_time()
                )
            except ThrottledLocally:  # not sent: the server refuses most of what it gets
                _current.get().budget = True
                return False
            _current.get().budget = outcome.stopped in ("budget", "throttled")
            return outcome.stopped == "ok"

        retry = {"no retry": _no_retry, "naive": _naive, "backoff": _backoff}.get(policy)

        async def logical_call() -> bool:
            call = LogicalCall(anyio.current_time())
            trace.calls.append(call)
            _current.set(call)
            deadline = call.started + scenario.deadline_s
            with anyio.move_on_after(scenario.deadline_s):
                if retry is None:
                    call.ok = await helped(deadline)
                else:
                    call.ok = await retry(attempt, deadline, policy_rng)
            call.finished = anyio.current_time()
            return call.ok

        async with anyio.create_task_group() as tg:
            for index in range(max(timeline.agents)):
                tg.start_soon(
                    _agent,
                    index,
                    scenario,
                    timeline,
                    logical_call,
                    random.Random(f"{seed}:agents:agent:{index}"),
                )


async def _agent(
    index: int,
    scenario: AgentsScenario,
    timeline: _Timeline,
    logical_call: Callable[[], Awaitable[bool]],
    rng: random.Random,
) -> None:
    """One agent: tasks of several calls, a think before each, until the phases end; it sits
    out the phases whose fleet is smaller than its place in it."""
    while True:
        now = anyio.current_time()
        if now >= timeline.end:
            return
        phase = timeline.index(now)
        if index >= timeline.agents[phase]:
            following = timeline.starts[phase + 1] if phase + 1 < len(timeline.starts) else None
            await anyio.sleep_until(timeline.end if following is None else following)
            continue
        for _ in range(scenario.calls_per_task):
            # A think that outlasts the run ends with it: the run stops when the last calls
            # are answered, not when the slowest thinker wakes.
            think = anyio.current_time() + rng.expovariate(1.0 / scenario.think_s)
            await anyio.sleep_until(min(think, timeline.end))
            now = anyio.current_time()
            if now >= timeline.end or index >= timeline.agents[timeline.index(now)]:
                break
            if not await logical_call():
                break  # one failed call fails the task: the agent starts another


async def run_agents(
    scenario: AgentsScenario, policies: Sequence[AgentPolicy] = AGENT_POLICIES
) -> AgentsResult:
    """Every policy side by side in one event loop, each with its own server and client."""
    timeline = _Timeline(scenario, anyio.current_time())
    traces = {policy: _Trace() for policy in policies}
    async with anyio.create_task_group() as tg:
        for policy in policies:
            tg.start_soon(_run_policy, policy, scenario, timeline, traces[policy])
    return AgentsResult(
        scenario,
        tuple(_summarise(policy, scenario, timeline, traces[policy]) for policy in policies),
    )


def _summarise(
    policy: AgentPolicy, scenario: AgentsScenario, timeline: _Timeline, trace: _Trace
) -> PolicyRun:
    ends = [*timeline.starts[1:], timeline.end]
    figures = []
    for phase, start, end in zip(timeline.phases, timeline.starts, ends, strict=True):
        calls = [c for c in trace.calls if start <= c.started < end]
        sent = [accepted for at, accepted in trace.attempts if start <= at < end]
        accepted = sum(sent)
        figures.append(
            PhaseFigures(
                phase=phase.name,
                calls=len(calls),
                offered=round(len(calls) / (end - start) / scenario.capacity_rps, 2),
                attempts=sum(c.attempts for c in calls),
                attempts_per_call=round(sum(c.attempts for c in calls) / max(1, len(calls)), 3),
                retries=sum(max(0, c.attempts - 1) for c in calls),
                refusals_per_accepted=round((len(sent) - accepted) / max(1, accepted), 3),
                goodput=round(_done_between(trace, start, end) / (end - start), 2),
                within_deadline=round(sum(c.ok for c in calls) / max(1, len(calls)), 4),
                budget_refusals=sum(c.budget for c in calls),
            )
        )
    back = timeline.starts[[p.name for p in timeline.phases].index(RECOVERY)]
    return PolicyRun(
        policy=policy,
        phases=tuple(figures),
        recovery_goodput=float(_done_between(trace, back + 1.0, back + 2.0)),
    )


def _done_between(trace: _Trace, start: float, end: float) -> int:
    return sum(1 for c in trace.calls if c.ok and start <= c.finished < end)
