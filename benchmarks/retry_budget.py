"""Retry budgets measured: a fleet of client processes against a scripted server, in virtual
time, each retry policy on the same seed.

The server is the library's own admission: a ``ConcurrencyGuard`` with a short queue (SERVER_BUSY,
with its advice of successive openings) or a rate limit (RATE_LIMITED; its callers known by a
client key, or anonymous). Logical calls arrive as
a Poisson stream, spread over ``PROCESSES`` client processes, each with its own retry budget
(the budget is per process and server). Every call has a deadline. The clients are the real
``fusion_guard.client.Retrying``; only the naive policy is a loop of its own (three attempts,
10 ms apart, deaf to the advice), as hand-written retry loops are.

Time is trio's ``MockClock``: it jumps to the next timer whenever every task waits, so a minute
of traffic runs in a second or two and every run repeats exactly.

    python benchmarks/retry_budget.py [--seeds 2 3] [--models busy busy-exp rate rate-anon]

The default policy was chosen on seed 1 of the ``busy`` model; seeds 2 and 3 and the other
models are the check it was not tuned to them (docs/client.md has the figures).
"""

from __future__ import annotations

import argparse
import collections
import math
import random
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import anyio
import trio
from trio.testing import MockClock

from fusion_guard import (
    ConcurrencyGuard,
    Guard,
    MemoryBackend,
    RateLimited,
    ServerBusy,
    ToolResponse,
    parse_tool_error,
)
from fusion_guard.client import (
    AdaptiveThrottle,
    Budget,
    CallOutcome,
    RetryBudget,
    Retrying,
    ThrottledLocally,
    TokenBucket,
    default_budget,
    default_throttle,
)
from fusion_guard.integrations._common import RetryWindows
from fusion_guard.wire._shedding import retry_storm

PROCESSES = 4
DEADLINE_S = 5.0
CAPACITY = 50.0  # calls per second, in every model
MODELS = ("busy", "busy-exp", "busy-lognormal", "rate", "rate-anon")
LOGNORMAL_SIGMA = 1.0
"""``busy-lognormal``'s service times: lognormal with this sigma (a coefficient of variation of
1.3), a model none of the client's choices was made on."""
BATCH_MEAN = 4.0
"""``--arrivals batches``: calls arrive in batches of geometric size with this mean (agents
fanning a task out into parallel calls), the batches a Poisson stream; the same mean load."""
ARRIVALS = ("poisson", "batches")

# -- the server -------------------------------------------------------------------------------


@dataclass
class Attempt:
    at: float
    accepted: bool
    attempt: int  # 1 for a call's first


TOOL = "search"
"""The one tool's name, as the adapters' ``RetryWindows`` count its arrivals."""


class Server:
    """One tool behind the library's admission; records every attempt. ``storm``: the adapters'
    retry-storm rule on the refusals (``RetryWindows``: a refused retry, while retries are
    more than half of the last second's arrivals, at least 10, says ``retry_now`` = ``false``
    with twice the advice), as ``install`` applies it."""

    def __init__(self, model: str, rng: random.Random, *, storm: bool = False) -> None:
        self.model = model
        self.rng = rng
        self.attempts: list[Attempt] = []
        self.retries = RetryWindows(clock=anyio.current_time) if storm else None
        self.storm_refusals = 0  # refusals that said retry_now = false
        self.slow_factor = 1.0  # service times are multiplied by it (2: half the capacity)
        if model.startswith("rate"):
            backend = MemoryBackend(clock=anyio.current_time)
            self.guard = Guard(
                max_active=None,
                timeout=None,
                rate=CAPACITY,
                burst=10,
                metrics=False,
                rate_backend=backend,
            )
        else:
            slots = {"busy": 10, "busy-exp": 20, "busy-lognormal": 15}[model]
            self.mean_service = slots / CAPACITY
            # A short queue, as a tool tuned for interactive callers has: it absorbs the
            # arrivals' own burstiness, and past a second's wait the call is refused.
            self.slots = ConcurrencyGuard(
                slots,
                max_queue=2 * slots,
                queue_timeout=1.0,
                name=TOOL,
                clock=anyio.current_time,
            )

    def _service(self) -> float:
        if self.model == "busy":  # uniform around the mean
            return self.mean_service * self.rng.uniform(0.5, 1.5) * self.slow_factor
        if self.model == "busy-lognormal":  # heavy-tailed: a few calls take many times the mean
            mu = math.log(self.mean_service) - LOGNORMAL_SIGMA**2 / 2
            return self.rng.lognormvariate(mu, LOGNORMAL_SIGMA) * self.slow_factor
        return self.rng.expovariate(1 / self.mean_service) * self.slow_factor

    async def call(self, attempt: int, caller: str) -> ToolResponse:
        response = await self._call(attempt, caller)
        retries = self.retries
        if retries is not None and response.is_error and attempt > 1 and retries.storming(TOOL):
            self.storm_refusals += 1
            response = retry_storm(response)
        return response

    async def _call(self, attempt: int, caller: str) -> ToolResponse:
        now = anyio.current_time()
        if self.retries is not None:
            self.retries.arrived(TOOL, attempt)
        if self.model.startswith("rate"):
            # "rate": each logical call is a known caller (a client key, as agents with their
            # own identity have), which the limit staggers; "rate-anon": no key at all.
            client = caller if self.model == "rate" else None
            try:
                async with self.guard.admit("search", client=client):
                    pass
                response, refused = ToolResponse("done", is_error=False), False
            except RateLimited as limited:
                response, refused = limited.response, True
        else:
            try:
                async with self.slots.slot():
                    self.attempts.append(Attempt(now, True, attempt))
                    await anyio.sleep(self._service())
                return ToolResponse("done", is_error=False)
            except ServerBusy as busy:
                response, refused = busy.response, True
        self.attempts.append(Attempt(now, not refused, attempt))
        return response


def _advice(response: ToolResponse) -> float | None:
    parsed = parse_tool_error(response.text)
    return None if parsed is None else parsed.retry_after


# -- the policies -----------------------------------------------------------------------------


class Naive:
    """Three attempts 10 ms apart, whatever the server says: the hand-written loop."""

    async def run(self, fn: Callable[[int], Awaitable[ToolResponse]]) -> tuple[bool, int]:
        for attempt in (1, 2, 3):
            response = await fn(attempt)
            if not response.is_error:
                return True, attempt
            if attempt < 3:
                await anyio.sleep(0.01)
        return False, 3


@dataclass(frozen=True)
class Policy:
    name: str
    budget: Callable[[], Budget | None] | None  # None: no retries at all
    throttle: Callable[[random.Random], AdaptiveThrottle] | None = None
    naive: bool = False
    max_attempts: int = 3


POLICIES = {
    p.name: p
    for p in (
        Policy("no retry", None),
        Policy("naive 3 attempts", None, naive=True),
        Policy("MongoDB: advice, 2 retries", lambda: None),
        Policy("gRPC token bucket 10/0.1", TokenBucket, max_attempts=5),
        Policy(
            "Finagle 20% + 10/s",
            lambda: RetryBudget(0.2, min_per_second=10, window=10, clock=_now),
            max_attempts=5,
        ),
        Policy(
            ".NET 10%",
            lambda: RetryBudget(0.1, min_per_second=0, window=10, clock=_now),
            max_attempts=5,
        ),
        Policy(
            "helper (default)",
            lambda: default_budget(clock=_now),
            lambda rng: default_throttle(clock=_now, rng=rng),
            max_attempts=5,
        ),
        Policy("helper, budget only", lambda: default_budget(clock=_now), max_attempts=5),
        # Two larger budgets with the default throttle, tried for the blip at 16 processes
        # (docs/client-measured.md, "Models none of it was chosen on"); not adopted.
        Policy(
            "helper, floor 0.2/s",
            lambda: RetryBudget(min_per_second=0.2, clock=_now),
            lambda rng: default_throttle(clock=_now, rng=rng),
            max_attempts=5,
        ),
        Policy(
            "helper, budget 35%",
            lambda: RetryBudget(0.35, clock=_now),
            lambda rng: default_throttle(clock=_now, rng=rng),
            max_attempts=5,
        ),
        Policy(
            "helper, throttle k=2 2 s",
            lambda: default_budget(clock=_now),
            lambda rng: AdaptiveThrottle(2.0, window=2.0, clock=_now, rng=rng),
            max_attempts=5,
        ),
        Policy("helper timing, no budget", lambda: None, max_attempts=5),
        # Issue 43's blip: a gate patient for a burst, and a budget refunding the retries the
        # server accepted; and the throttle alone, which is what admitting every retry whose
        # advice fits its deadline comes to here (docs/client-measured.md, "The server's advice
        # and a patient gate"). Not adopted.
        *(
            Policy(
                f"helper, patience {w:g} s",
                lambda: default_budget(clock=_now),
                lambda rng, w=w: AdaptiveThrottle(patience=w, clock=_now, rng=rng),
                max_attempts=5,
            )
            for w in (0.5, 1.0)
        ),
        *(
            Policy(
                f"helper, patience {w:g} s, refund",
                lambda: RetryBudget(refund=True, clock=_now),
                lambda rng, w=w: AdaptiveThrottle(patience=w, clock=_now, rng=rng),
                max_attempts=5,
            )
            for w in (0.5, 1.0)
        ),
        Policy(
            "helper, throttle only",
            lambda: None,
            lambda rng: default_throttle(clock=_now, rng=rng),
            max_attempts=5,
        ),
    )
}
HELPER = "helper (default)"
"""The helper's defaults (``Retrying`` as ``wrap`` makes it: the default budget and throttle)."""
TIMING = "helper timing, no budget"
"""The helper's waits alone: what the spread of retries is measured on (with the budget, a crowd
at a cold start is mostly sent back at once, leaving too few retries to measure a spread)."""


def _now() -> float:
    return anyio.current_time()


class Process:
    """One client process: its own budget and throttle, shared by all its calls."""

    def __init__(self, policy: Policy, rng: random.Random) -> None:
        self.naive = Naive() if policy.naive else None
        throttle = None if policy.throttle is None else policy.throttle(rng)
        self.retrying = Retrying(
            server="search",
            max_attempts=1 if policy.budget is None else policy.max_attempts,
            budget=None if policy.budget is None else policy.budget(),
            throttle=throttle,
            timeout=DEADLINE_S,
            rng=rng,
        )

    async def call(self, send: Callable[[int], Awaitable[ToolResponse]]) -> tuple[int, str]:
        """(attempts sent, why the last answer was the last)."""
        if self.naive is not None:
            ok, attempts = await self.naive.run(send)
            return attempts, "ok" if ok else "attempts"
        try:
            outcome: CallOutcome[ToolResponse] = await self.retrying.attempts(
                lambda attempt, _remaining: send(attempt), tool="search"
            )
        except ThrottledLocally:
            return 0, "throttled"
        return outcome.attempts, outcome.stopped


# -- scenarios --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """Offered load (x capacity) and a service slow-down, each a step function of time."""

    name: str
    duration: float
    load: Callable[[float], float]
    slow: Callable[[float], float] = lambda _t: 1.0
    volley: int = 0  # calls arriving together at 0 s, before the stream


SCENARIOS = {
    "sustained": Scenario("sustained", 20.0, lambda _t: 3.0),
    # A process that has run a while (12 s: budgets with a window have filled it), then 1 s at
    # 2x the capacity.
    "blip": Scenario("blip", 17.0, lambda t: 2.0 if 12.0 <= t < 13.0 else 0.6),
    # Half the capacity for 6 s under 1.2x the full capacity, then all of it back.
    "recovery": Scenario("recovery", 12.0, lambda _t: 1.2, lambda t: 2.0 if 2 <= t < 8 else 1.0),
    # Two seconds' worth of calls at once (a crowd of agents starting together), then 0.5x.
    "crowd": Scenario("crowd", 6.0, lambda _t: 0.5, volley=int(2 * CAPACITY)),
}


@dataclass
class Call:
    arrived: float
    finished: float = math.nan
    ok: bool = False
    attempts: int = 0
    stopped: str = ""  # why the answer was the last (StopReason; "throttled" before sending)
    sent: list[tuple[float, float | None]] = field(default_factory=list)
    """(when, the advice it got back) for each attempt."""

    def earliest_retry(self) -> float:
        """The least time from a refusal's advised moment to the retry after it (negative:
        sent early); inf when the call was never retried after advice."""
        gaps = [
            at - (before + advice)
            for (before, advice), (at, _) in zip(self.sent, self.sent[1:], strict=False)
            if advice is not None
        ]
        return min(gaps, default=math.inf)


@dataclass
class Run:
    model: str
    scenario: str
    policy: str
    seed: int
    calls: list[Call] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    storm_refusals: int = 0  # refusals saying retry_now = false (with the storm rule)

    def window(self, start: float, end: float) -> list[Call]:
        return [c for c in self.calls if start <= c.arrived < end]

    def attempts_per_call(self, start: float, end: float) -> float:
        calls = self.window(start, end)
        return sum(c.attempts for c in calls) / len(calls)

    def refusals_per_accepted(self, start: float, end: float) -> float:
        sent = [a for a in self.attempts if start <= a.at < end]
        accepted = sum(a.accepted for a in sent)
        return (len(sent) - accepted) / max(accepted, 1)

    def goodput(self, start: float, end: float) -> float:
        """Successes finished in [start, end), per second."""
        done = sum(1 for c in self.calls if c.ok and start <= c.finished < end)
        return done / (end - start)

    def success(self, start: float, end: float) -> float:
        calls = self.window(start, end)
        return sum(c.ok and c.finished - c.arrived <= DEADLINE_S for c in calls) / len(calls)

    def retry_peak_ratio(self, bucket: float = 0.1) -> float:
        """The busiest ``bucket``-second window's retries over the mean window's, between the
        first and the last retry."""
        times = sorted(a.at for a in self.attempts if a.attempt > 1)
        if len(times) < 2:
            return 0.0
        counts: dict[int, int] = {}
        for t in times:
            counts[math.floor((t - times[0]) / bucket)] = (
                counts.get(math.floor((t - times[0]) / bucket), 0) + 1
            )
        windows = math.floor((times[-1] - times[0]) / bucket) + 1
        return max(counts.values()) / (len(times) / windows)


def simulate(
    model: str,
    scenario: Scenario,
    policy: Policy,
    seed: int,
    processes: int = PROCESSES,
    *,
    storm: bool = False,
    arrivals: str = "poisson",
) -> Run:
    """One run in virtual time on trio (``storm``: with the retry-storm rule, see ``Server``;
    ``arrivals``: ``poisson`` or ``batches``, see ``BATCH_MEAN``)."""
    run = Run(model, scenario.name, policy.name, seed)

    async def main() -> None:
        rng = random.Random(seed)
        server = Server(model, random.Random(rng.random()), storm=storm)
        clients = [Process(policy, random.Random(rng.random())) for _ in range(processes)]
        start = anyio.current_time()

        async def one(call: Call, process: Process, caller: str) -> None:
            async def send(attempt: int) -> ToolResponse:
                at = anyio.current_time() - start
                response = await server.call(attempt, caller)
                advice = _advice(response) if response.is_error else None
                call.sent.append((at, advice))
                return response

            call.attempts, call.stopped = await process.call(send)
            call.ok = call.stopped == "ok"
            call.finished = anyio.current_time() - start

        async with anyio.create_task_group() as tasks:
            for n in range(scenario.volley):
                call = Call(0.0)
                run.calls.append(call)
                tasks.start_soon(one, call, clients[n % processes], f"agent-{n}")
            now, n = 0.0, scenario.volley
            batches = arrivals == "batches"
            while True:
                rate = scenario.load(now) * CAPACITY
                now += rng.expovariate(rate / BATCH_MEAN if batches else rate)
                if now >= scenario.duration:
                    break
                size = 1
                if batches:  # geometric, mean BATCH_MEAN
                    size += int(math.log(1.0 - rng.random()) / math.log(1.0 - 1.0 / BATCH_MEAN))
                await anyio.sleep(start + now - anyio.current_time())
                server.slow_factor = scenario.slow(now)
                for _ in range(size):
                    call = Call(now)
                    run.calls.append(call)
                    tasks.start_soon(one, call, clients[n % processes], f"agent-{n}")
                    n += 1
        run.attempts = [Attempt(a.at - start, a.accepted, a.attempt)
                        for a in server.attempts]  # fmt: skip
        run.storm_refusals = server.storm_refusals

    # Trio reorders each batch of runnable tasks at random (to shake out ordering bugs), from a
    # private generator: seeded, a run repeats exactly.
    trio._core._run._r.seed(seed)
    anyio.run(main, backend="trio", backend_options={"clock": MockClock(autojump_threshold=0)})
    return run


# -- the report -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figures:
    """The targets' figures of one policy on one model and seed."""

    attempts_per_call: float  # sustained 3x overload, arrivals in [2, 18) s
    refusals_per_accepted: float  # the same, attempts sent in [2, 18) s
    goodput: float  # the same, successes per second finished in [2, 18) s
    blip_success: float  # share of calls arriving in [11.5, 14) s done within the deadline
    recovery_goodput: float  # successes finished in [9, 10) s, capacity back at 8 s
    earliest_retry: float  # the least (retry - advised moment), over every run
    storm_refusals: tuple[int, int, int]  # retry_now = false: sustained, blip, recovery


def measure(
    model: str,
    policy: str,
    seed: int,
    processes: int = PROCESSES,
    *,
    storm: bool = False,
    arrivals: str = "poisson",
) -> Figures:
    chosen = POLICIES[policy]
    options = {"storm": storm, "arrivals": arrivals}
    sustained = simulate(model, SCENARIOS["sustained"], chosen, seed, processes, **options)
    earliest = min(c.earliest_retry() for c in sustained.calls)
    storms = (sustained.storm_refusals, 0, 0)
    if model.startswith("rate"):  # a rate limit's capacity does not move: no blip or recovery here
        blip_success = recovery = math.nan
    else:
        blip = simulate(model, SCENARIOS["blip"], chosen, seed, processes, **options)
        recovery_run = simulate(model, SCENARIOS["recovery"], chosen, seed, processes, **options)
        storms = (sustained.storm_refusals, blip.storm_refusals, recovery_run.storm_refusals)
        blip_success = blip.success(11.5, 14.0)
        recovery = recovery_run.goodput(9.0, 10.0)
        earliest = min(earliest, *(c.earliest_retry() for c in blip.calls + recovery_run.calls))
    return Figures(
        sustained.attempts_per_call(2, 18),
        sustained.refusals_per_accepted(2, 18),
        sustained.goodput(2, 18),
        blip_success,
        recovery,
        earliest,
        storms,
    )


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] if ordered else math.nan


def trace(
    model: str, seed: int, policy: str, processes: int = PROCESSES, *, arrivals: str = "poisson"
) -> Iterator[str]:
    """What stopped each call of the blip that was not done in time (its stop reason and the
    attempts it sent: 0 for a first attempt held back), and the advice the server's refusals
    carried in the blip and under sustained overload (the median and the 90th percentile):
    whether a retry's advice tells a blip from an overload."""
    chosen = POLICIES[policy]
    # In the order ``measure`` runs them: a run in a process that ran another first can differ
    # (by a few refusals of 600 at 3x: trio breaks ties between deadlines at one virtual instant
    # by the cancel scopes' addresses, which depend on what ran before), and the tables' figures
    # are those of the sustained run first.
    sustained = simulate(model, SCENARIOS["sustained"], chosen, seed, processes, arrivals=arrivals)
    blip = simulate(model, SCENARIOS["blip"], chosen, seed, processes, arrivals=arrivals)
    lost = collections.Counter(
        (c.stopped, c.attempts)
        for c in blip.window(11.5, 14.0)
        if not (c.ok and c.finished - c.arrived <= DEADLINE_S)
    )
    stops = ", ".join(f"{n} {why} after {sent}" for (why, sent), n in sorted(lost.items()))
    yield f"  {policy}, seed {seed}: blip calls lost: {stops or 'none'}"
    for name, run, start, end in (("blip", blip, 12.0, 14.0), ("3x", sustained, 2.0, 18.0)):
        advice = [a for c in run.calls for at, a in c.sent if a is not None and start <= at < end]
        yield (
            f"    advice in the {name} ({start:g}-{end:g} s): {len(advice)} refusals, median"
            f" {_quantile(advice, 0.5):.2f} s, 90th percentile {_quantile(advice, 0.9):.2f} s"
        )


def spread(seed: int, policy: str = TIMING, model: str = "rate") -> float:
    """RATE_LIMITED retries after a crowd: the busiest 100 ms window over the mean."""
    return simulate(model, SCENARIOS["crowd"], POLICIES[policy], seed).retry_peak_ratio()


def table(
    model: str,
    seed: int,
    policies: list[str],
    processes: int = PROCESSES,
    *,
    storm: bool = False,
    arrivals: str = "poisson",
) -> Iterator[str]:
    rule = ", the retry-storm rule on" if storm else ""
    rule += ", arrivals in batches" if arrivals == "batches" else ""
    yield f"model {model}, seed {seed} (capacity {CAPACITY:g}/s, {processes} processes{rule})"
    yield (
        f"{'policy':<26}{'att/call':>9}{'ref/acc':>9}{'goodput':>9}{'blip ok':>9}"
        f"{'recov':>8}{'early ms':>9}" + (f"{'storm s/b/r':>14}" if storm else "")
    )
    for name in policies:
        f = measure(model, name, seed, processes, storm=storm, arrivals=arrivals)
        early = "-" if f.earliest_retry == math.inf else f"{f.earliest_retry * 1000:.0f}"
        storms = "/".join(str(n) for n in f.storm_refusals)
        yield (
            f"{name:<26}{f.attempts_per_call:>9.2f}{f.refusals_per_accepted:>9.2f}"
            f"{f.goodput:>9.1f}{f.blip_success:>9.1%}{f.recovery_goodput:>8.1f}{early:>9}"
            + (f"{storms:>14}" if storm else "")
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--models", nargs="+", default=["busy", "busy-exp", "rate"],
                        choices=MODELS)  # fmt: skip
    parser.add_argument(
        "--arrivals",
        default="poisson",
        choices=ARRIVALS,
        help="a Poisson stream of calls, or of batches of calls (see BATCH_MEAN)",
    )
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    parser.add_argument(
        "--processes", type=int, default=PROCESSES, help="client processes sharing the load"
    )
    parser.add_argument(
        "--storm-rule",
        action="store_true",
        help="the server applies the adapters' retry-storm rule (retry_now=false); the last"
        " column counts those refusals in the sustained, blip and recovery runs",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="instead of the tables: what stopped each blip call not done in time, and the"
        " advice refusals carried in the blip and at 3x (the busy models)",
    )
    args = parser.parse_args(argv)
    if args.processes < 1:
        parser.error(f"--processes must be at least 1, got {args.processes}")
    if args.trace:
        for model in args.models:
            if model.startswith("rate"):
                continue  # a rate limit's capacity does not move: no blip
            print(f"model {model} ({args.processes} processes, arrivals {args.arrivals})")
            for seed in args.seeds:
                for policy in args.policies:
                    for line in trace(model, seed, policy, args.processes, arrivals=args.arrivals):
                        print(line)
        return 0
    for model in args.models:
        for seed in args.seeds:
            lines = table(
                model, seed, args.policies, args.processes,
                storm=args.storm_rule, arrivals=args.arrivals,
            )  # fmt: skip
            for line in lines:
                print(line)
            print()
    print("RATE_LIMITED retries after a crowd: busiest 100 ms window / mean (retries, calls ok)")
    for model in ("rate", "rate-anon"):
        for policy in (TIMING, HELPER):
            for seed in args.seeds:
                crowd, chosen = SCENARIOS["crowd"], POLICIES[policy]
                run = simulate(model, crowd, chosen, seed, args.processes)
                retries = sum(a.attempt > 1 for a in run.attempts)
                ok = sum(c.ok for c in run.calls) / len(run.calls)
                print(
                    f"  {model:<10}{policy:<26}seed {seed}: {run.retry_peak_ratio():.2f}x"
                    f" ({retries} retries, {ok:.0%} ok)"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
