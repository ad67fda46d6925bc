"""How much a guard sheds when the tool is *not* overloaded, and what it does when it is: a
tool model behind a guard, Poisson arrivals at a multiple of its capacity, in virtual time.

::

    python benchmarks/light_load_shed.py                          # every model, 0.5x 0.8x 1.5x 4x
    python benchmarks/light_load_shed.py --models heavy --loads 0.8 --policies issue
    python benchmarks/light_load_shed.py --seeds 1-3 --seconds 60 --json figures.json
    python benchmarks/light_load_shed.py --replay tight cache arg_cost --loads 0.8 --seeds 1-3
    python benchmarks/light_load_shed.py --replay cache --loads 0.8 --seeds 1-3 --max-queue 100000
    python benchmarks/light_load_shed.py --replay cache arg_cost --loads 0.8 --queue-alone
    python benchmarks/light_load_shed.py --replay cache --loads 0.8 --queue-alone --at-slo
    python benchmarks/light_load_shed.py --replay cache arg_cost tight --loads 0.8 --offered

Per model, load and policy: the share of calls refused (``shed``), split by rule (``predicted``
at arrival or in the queue, ``expired`` after waiting ``queue_timeout``, ``full`` / ``standing``),
and the same run without predictive shedding (``shed_off``: what the queue would really time out
or overflow); at overload, the share of refusals answered early (before half the timeout) and the
goodput against the tool's capacity. The policies: ``issue`` is issue 41's
``ConcurrencyGuard(max_active=2, max_queue=16, queue_timeout=0.15)`` (the slots at the true worker
count); ``fixed`` is ``Guard(max_active=<workers>)``, ``auto`` the default ``Guard()``.

The models (calls beyond the workers wait inside the tool, FIFO):

- ``heavy``: log-normal sigma 1.0, 20 ms mean, 2 workers (the demo's tool, without contention);
- ``heavy12``: log-normal sigma 1.2, 20 ms mean, 2 workers;
- ``pool``: a database pool of 4, log-normal sigma 0.5, 10 ms mean, each call piled up beyond
  the pool slowing every service 1 %;
- ``cache``: 90 % of calls 1-2 ms, 10 % 100-300 ms (uniform), 4 workers;
- ``argdep``: 80 % cheap lookups (log-normal 5 ms, sigma 0.3), 20 % queries (80 ms, sigma 0.5),
  4 workers;
- ``slow``: 1-5 s (uniform), 2 workers, as an LLM-backed tool;
- ``threads``: a thread pool of 4, 10 ms of CPU (gamma, shape 8) per call.

``--replay`` runs cells of the tool zoo (``fusion_guard.demo._zoo``; ``tight`` is its cell of
issue 41's configuration) call by call instead: each call's work is drawn with its arrival, so
the same call can be followed with predictive shedding on and off. Per seed, the calls refused
by rule, and what became of the calls refused as ``predicted`` in the run without it (served,
expired, refused by the queue's count): whether the guard refused calls the queue would have
served in time. ``--queue-alone`` sets issue 41's bar for each cell: the same calls through the
queue alone (no count, no standing limit, no predictive shedding: only ``queue_timeout`` and the
caller's own timeout end a wait), so what *that* run refuses or times out is what the queue would
really time out; beside it, what the calls the guard refused became there, and the goodput within
the model's SLO both ways; with ``--at-slo``, the queue alone waits at most the model's SLO (a
call that waited that long is served late anyway), the bar were ``queue_timeout`` set to it.
``--replay CELL --at-slo`` (without ``--queue-alone``) runs the guard itself with its
``queue_timeout`` at the model's SLO, predictive shedding on and off. ``--replay CELL --offered``
sets what each cell asks of the tool beside what the guard refuses: the work its calls bring
(each call's drawn service over the worker-seconds there are), over the measured window and at
its peak over the busiest 0.5, 1 and 2 s of it, and the share of the refusals made in the busiest
2 s or the second after. A cell at "0.8x" is 0.8x on average over the
seeds; a seed's own calls can bring more than the tool serves for seconds on end.

Runs on asyncio in virtual time (``fusion_guard.demo._virtual_time``): time passes only in the
tool's sleeps and the gaps between arrivals, so the figures are the guard's alone, and repeat.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import logging
import math
import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio

from fusion_guard import ConcurrencyGuard, Guard, ServerBusy
from fusion_guard.admission import _assembly, _concurrency, _discipline, _learning, _refusal
from fusion_guard.demo import _zoo
from fusion_guard.demo._virtual_time import run_in_virtual_time
from fusion_guard.demo._zoo_models import model_named

Draw = Callable[[random.Random], float]


def lognormal(mean: float, sigma: float) -> Draw:
    mu = math.log(mean) - sigma * sigma / 2
    return lambda rng: rng.lognormvariate(mu, sigma)


def mixture(*parts: tuple[float, Draw]) -> Draw:
    def draw(rng: random.Random) -> float:
        pick = rng.random()
        for share, part in parts:
            if pick < share:
                return part(rng)
            pick -= share
        return parts[-1][1](rng)

    return draw


def uniform(low: float, high: float) -> Draw:
    return lambda rng: rng.uniform(low, high)


def gamma(mean: float, shape: float) -> Draw:
    return lambda rng: rng.gammavariate(shape, mean / shape)


@dataclass(frozen=True)
class Model:
    name: str
    workers: int
    draw: Draw
    mean: float
    contention: float = math.inf  # each call piled up beyond the workers: 1/contention slower

    @property
    def capacity(self) -> float:
        return self.workers / self.mean


MODELS = {
    model.name: model
    for model in (
        Model("heavy", 2, lognormal(0.020, 1.0), 0.020),
        Model("heavy12", 2, lognormal(0.020, 1.2), 0.020),
        Model("pool", 4, lognormal(0.010, 0.5), 0.010, contention=100.0),
        Model(
            "cache",
            4,
            mixture((0.9, uniform(0.001, 0.002)), (0.1, uniform(0.1, 0.3))),
            0.9 * 0.0015 + 0.1 * 0.2,
        ),
        Model(
            "argdep",
            4,
            mixture((0.8, lognormal(0.005, 0.3)), (0.2, lognormal(0.080, 0.5))),
            0.8 * 0.005 + 0.2 * 0.080,
        ),
        Model("slow", 2, uniform(1.0, 5.0), 3.0),
        Model("threads", 4, gamma(0.010, 8.0), 0.010),
    )
}


class Tool:
    """``workers`` servers behind a FIFO queue inside the tool."""

    def __init__(self, model: Model, rng: random.Random) -> None:
        self.model = model
        self.rng = rng
        self.pool = anyio.Semaphore(model.workers)
        self.inside = 0

    async def __call__(self) -> str:
        self.inside += 1
        try:
            async with self.pool:
                piled = max(0, self.inside - self.model.workers)
                await anyio.sleep(self.model.draw(self.rng) * (1.0 + piled / self.model.contention))
        finally:
            self.inside -= 1
        return "ok"


@dataclass
class Cell:
    model: str
    load: float
    policy: str
    seed: int
    calls: int = 0
    ok: int = 0
    rules: Counter[str] = field(default_factory=Counter)
    early: int = 0  # refusals answered before half the queue timeout
    goodput: float = 0.0  # calls served per second over the tool's capacity
    p99: float = 0.0  # of the served calls' latency

    @property
    def shed(self) -> float:
        return sum(self.rules.values()) / max(self.calls, 1)


def _rule(reason: str | None, text: str) -> str:
    """The rule that refused a call, from its SERVER_BUSY envelope."""
    if '"predicted"' in text or "predicted" in text.split("reason")[-1]:
        return "predicted"
    if reason == "queue_timeout":
        return "expired"
    if "standing" in text:
        return "standing"
    return "full"


def _make(policy: str, model: Model, predictive: bool) -> Callable[[Tool], Any]:
    """A function calling the tool through the policy's guard: None when served, else the
    rule that refused it."""
    if policy == "issue":
        guard = ConcurrencyGuard(
            max_active=model.workers, max_queue=16, queue_timeout=0.15,
            predictive=predictive, clock=anyio.current_time,
        )  # fmt: skip

        async def through_slots(tool: Tool) -> str | None:
            try:
                async with guard.slot():
                    await tool()
            except ServerBusy as busy:
                return _rule(busy.reason, busy.response.text)
            return None

        return through_slots
    limits: dict[str, Any] = {} if policy == "auto" else {"max_active": model.workers}
    whole = Guard(clock=anyio.current_time, metrics=False, **limits)
    if not predictive:  # a harness's reach into the tool's slots: no predictive shedding
        slots = whole.concurrency("tool")
        assert slots is not None  # every policy here limits the tool
        discipline = slots._core.discipline  # type: ignore[union-attr]
        discipline.predictive = discipline.rejudging = False

    async def through_guard(tool: Tool) -> str | None:
        response = await whole.call("tool", tool)
        if not response.is_error:
            return None
        if response.code != "SERVER_BUSY":
            return "error"
        facts = response.facts or {}
        details = facts.get("details", facts)
        reason = details.get("reason") if isinstance(details, dict) else None
        return _rule(reason, response.text)

    return through_guard


async def _run(model: Model, load: float, policy: str, seed: int, seconds: float,
               predictive: bool) -> Cell:  # fmt: skip
    rng = random.Random(seed)
    tool = Tool(model, random.Random(seed + 1_000_003))
    call = _make(policy, model, predictive)
    cell = Cell(model.name, load, policy, seed)
    timeout = 0.15 if policy == "issue" else 5.0
    latencies: list[float] = []
    rate = load * model.capacity
    start = anyio.current_time()

    async def one() -> None:
        begun = anyio.current_time()
        rule = await call(tool)
        took = anyio.current_time() - begun
        if rule is None:
            cell.ok += 1
            latencies.append(took)
        else:
            cell.rules[rule] += 1
            cell.early += took < timeout / 2

    async with anyio.create_task_group() as tg:
        at = start
        while True:
            at += rng.expovariate(rate)
            if at - start >= seconds:
                break
            await anyio.sleep_until(at)
            cell.calls += 1
            tg.start_soon(one)
    cell.goodput = cell.ok / seconds / model.capacity
    if latencies:
        latencies.sort()
        cell.p99 = latencies[int(0.99 * (len(latencies) - 1))]
    return cell


def measure(model: str, load: float, policy: str, seed: int, seconds: float,
            predictive: bool = True) -> Cell:  # fmt: skip
    """One cell, run in virtual time."""

    async def run() -> Cell:
        return await _run(MODELS[model], load, policy, seed, seconds, predictive)

    return run_in_virtual_time(run)


@contextlib.contextmanager
def _watching(predictive: bool, refused: dict[float, str]) -> Iterator[None]:
    """While in force: every guard made with ``predictive`` as given, and each refusal's rule
    kept by the time it was answered (a harness's reach: the zoo makes its own guards)."""
    make, refuse = _discipline.QueueDiscipline.__init__, _refusal.Refusals.refuse

    def made(self: _discipline.QueueDiscipline, **options: Any) -> None:
        make(self, **{**options, "predictive": options["predictive"] and predictive})

    def refusing(self: _refusal.Refusals, reason: Any, queued: int, template: Any,
                 *args: Any, **kwargs: Any) -> ServerBusy:  # fmt: skip
        core = self._core
        predicted = core.predicted
        busy = refuse(self, reason, queued, template, *args, **kwargs)
        rule = "expired" if reason == "queue_timeout" else "full"
        if core.predicted > predicted:
            rule = "predicted"
        elif reason == "queue_full" and template is not self.busy:
            rule = "standing"
        refused[round(core.clock(), 9)] = rule
        return busy

    _discipline.QueueDiscipline.__init__ = made  # type: ignore[method-assign]
    _refusal.Refusals.refuse = refusing  # type: ignore[method-assign]
    try:
        yield
    finally:
        _discipline.QueueDiscipline.__init__ = make  # type: ignore[method-assign]
        _refusal.Refusals.refuse = refuse  # type: ignore[method-assign]


def replay(cell: str, load: float, policy: str, seed: int, predictive: bool,
           queue_timeout: float | None = None) -> dict[int, str]:  # fmt: skip
    """A zoo cell (``tight``: issue 41's configuration) under ``policy``: each call of the
    measured window's outcome (``ok``, ``timeout``, ``error``) or refusal rule, by its index;
    ``queue_timeout``: every guard's, in place of its own."""
    return {
        index: outcome
        for index, (outcome, _latency) in _timed_replay(
            cell, load, policy, seed, None, predictive, queue_timeout=queue_timeout
        ).items()
    }


@contextlib.contextmanager
def _default_queue(calls: int) -> Iterator[None]:
    """While in force: every default queue ``calls`` long (a given ``max_queue`` is kept)."""
    made, followed = _assembly.default_max_queue, _learning.default_max_queue

    def fixed(parallel: float, *, adaptive: bool = False) -> int:
        return calls

    _assembly.default_max_queue = _learning.default_max_queue = fixed
    try:
        yield
    finally:
        _assembly.default_max_queue, _learning.default_max_queue = made, followed


@contextlib.contextmanager
def _no_standing_limit() -> Iterator[None]:
    """While in force: no queue is ever held to its standing limit."""
    holds = _discipline.QueueDiscipline.holds_standing

    def never(self: _discipline.QueueDiscipline, now: float, queued: int,
              hold: float = 0.0) -> bool:  # fmt: skip
        return False

    _discipline.QueueDiscipline.holds_standing = never  # type: ignore[method-assign]
    try:
        yield
    finally:
        _discipline.QueueDiscipline.holds_standing = holds  # type: ignore[method-assign]


@contextlib.contextmanager
def _queue_timeout(seconds: float) -> Iterator[None]:
    """While in force: every guard made waits ``seconds`` at most in its queue."""
    assemble = _concurrency.assemble

    def timed(max_active: Any, max_queue: Any, queue_timeout: float, **options: Any) -> Any:
        return assemble(max_active, max_queue, seconds, **options)

    _concurrency.assemble = timed  # type: ignore[assignment]
    try:
        yield
    finally:
        _concurrency.assemble = assemble


#: The queue alone's length: no zoo cell at 0.8x comes near it.
ALONE = 100_000


def _timed_replay(cell: str, load: float, policy: str, seed: int, queue: int | None,
                  predictive: bool = True, standing: bool = True,
                  queue_timeout: float | None = None,
                  ) -> dict[int, tuple[str, float]]:  # fmt: skip
    """``replay`` with each call's latency, under a default queue of ``queue`` calls (None:
    the guard's own), the standing limit on or off, every ``queue_timeout`` as given (None:
    the guard's own)."""
    model = _zoo.TIGHT_MODEL if cell == "tight" else model_named(cell)
    refused: dict[float, str] = {}

    async def run() -> tuple[float, Any]:
        return await _zoo._simulate(model, load, seed, (policy,))

    with (
        _watching(predictive, refused),
        _default_queue(queue) if queue is not None else contextlib.nullcontext(),
        contextlib.nullcontext() if standing else _no_standing_limit(),
        contextlib.nullcontext() if queue_timeout is None else _queue_timeout(queue_timeout),
    ):
        begin, runs = run_in_virtual_time(run)
    calls = runs[policy]
    lo, hi = begin + model.settle_s, begin + model.total_s
    return {
        calls.index_of[r.intended]: (
            refused.get(round(r.intended + r.latency, 9), "full")
            if r.outcome == "shed"
            else r.outcome,
            r.latency,
        )
        for r in calls.records
        if lo <= r.intended < hi
    }


def _counterfactual_main(cells: Sequence[str], loads: Sequence[float],
                         policies: Sequence[str], seeds: range, queue: int) -> None:  # fmt: skip
    """What the calls refused by the queue's count (``full``) or the standing limit became
    with a default queue of ``queue`` calls: served within the model's SLO, served later than
    it (but within queue_timeout), or refused still."""
    for cell in cells:
        slo = (_zoo.TIGHT_MODEL if cell == "tight" else model_named(cell)).slo_s
        for policy in policies:
            for load in loads:
                for seed in seeds:
                    own = _timed_replay(cell, load, policy, seed, None)
                    long = _timed_replay(cell, load, policy, seed, queue)
                    became: Counter[str] = Counter()
                    for i, (rule, _) in own.items():
                        if rule in ("full", "standing"):
                            outcome, latency = long[i]
                            if outcome == "ok":
                                outcome = "ok in SLO" if latency <= slo else "ok late"
                            became[f"{rule}->{outcome}"] += 1
                    shed = [
                        sum(o in RULES for o, _ in run.values()) / len(run) for run in (own, long)
                    ]
                    p99 = [_p99([t for o, t in run.values() if o == "ok"]) for run in (own, long)]
                    print(
                        f"{cell:8} {policy:8} {load:4.1f}x seed {seed}: shed {shed[0]:6.2%}"
                        f" -> {shed[1]:6.2%} (queue {queue}), p99 {p99[0] * 1000:4.0f} ->"
                        f" {p99[1] * 1000:4.0f} ms; refused became {dict(became) or '-'}",
                        flush=True,
                    )


def queue_alone(cell: str, load: float, policy: str, seed: int,
                at_slo: bool = False) -> dict[str, float]:  # fmt: skip
    """Issue 41's bar for one cell: the same calls as the guard gets them (``refused``: the
    share it refuses) and through its queue alone (``alone_refused``, ``alone_timeout``: what
    that refuses after ``queue_timeout`` or the caller gives up on, the share the queue would
    really time out); of the calls the guard refused, the share that the queue alone served
    within the model's SLO (``refused_in_slo``) and later (``refused_late``); and the goodput
    within the SLO, over the calls sent, both ways (``slo``, ``alone_slo``). Shares of the
    calls sent in the measured window. ``at_slo``: the queue alone waits at most the model's
    SLO (a wait past it is a call served late), not the guard's ``queue_timeout``."""
    slo = (_zoo.TIGHT_MODEL if cell == "tight" else model_named(cell)).slo_s
    own = _timed_replay(cell, load, policy, seed, None)
    alone = _timed_replay(cell, load, policy, seed, ALONE, predictive=False, standing=False,
                          queue_timeout=slo if at_slo else None)  # fmt: skip
    sent = len(own)
    refused = [i for i, (outcome, _) in own.items() if outcome in RULES]
    served = [alone[i][1] for i in refused if alone[i][0] == "ok"]
    return {
        "refused": len(refused) / sent,
        "alone_refused": sum(o in RULES for o, _ in alone.values()) / sent,
        "alone_timeout": sum(o == "timeout" for o, _ in alone.values()) / sent,
        "refused_in_slo": sum(t <= slo for t in served) / sent,
        "refused_late": sum(t > slo for t in served) / sent,
        "slo": sum(o == "ok" and t <= slo for o, t in own.values()) / sent,
        "alone_slo": sum(o == "ok" and t <= slo for o, t in alone.values()) / sent,
    }


def _alone_main(cells: Sequence[str], loads: Sequence[float], policies: Sequence[str],
                seeds: range, at_slo: bool) -> None:  # fmt: skip
    for cell in cells:
        for policy in policies:
            for load in loads:
                for seed in seeds:
                    f = queue_alone(cell, load, policy, seed, at_slo)
                    print(
                        f"{cell:8} {policy:12} {load:4.1f}x seed {seed}: refused"
                        f" {f['refused']:6.2%} | the queue alone: refused"
                        f" {f['alone_refused']:6.2%}, timed out {f['alone_timeout']:6.2%};"
                        f" the refused served there in SLO {f['refused_in_slo']:6.2%},"
                        f" late {f['refused_late']:6.2%} | within SLO {f['slo']:6.2%}"
                        f" -> {f['alone_slo']:6.2%}",
                        flush=True,
                    )


#: The windows ``--offered`` reads the busiest stretch of a cell over (seconds).
OFFERED_WINDOWS = (0.5, 1.0, 2.0)


def offered_work(cell: str, load: float, seed: int) -> dict[str, Any]:
    """The work a zoo cell's calls bring, as a multiple of what the tool serves: each call's
    drawn service over the workers at its arrival, summed over the measured window
    (``window``) and over the busiest stretch of ``OFFERED_WINDOWS`` seconds ending in it
    (``peaks``: seconds -> (the multiple, the stretch's end, seconds from the start)), and each
    call's arrival (``arrivals``, seconds from the start, by the index ``replay`` keys). The calls
    are the zoo's own, drawn by running the cell with no policy (``_zoo._simulate``)."""
    model = _zoo.TIGHT_MODEL if cell == "tight" else model_named(cell)
    arrivals: list[float] = []
    services: list[float] = []
    arrive, draw = _zoo.poisson_arrivals, type(model).draw

    def arriving(*args: Any) -> list[float]:
        times = arrive(*args)
        arrivals.extend(times)
        return times

    def drawing(self: Any, rng: random.Random) -> Any:
        job = draw(self, rng)
        services.append(job.service)
        return job

    async def run() -> tuple[float, Any]:
        return await _zoo._simulate(model, load, seed, ())

    _zoo.poisson_arrivals = arriving
    type(model).draw = drawing  # type: ignore[method-assign]
    try:
        begin, _ = run_in_virtual_time(run)
    finally:
        _zoo.poisson_arrivals = arrive
        type(model).draw = draw  # type: ignore[method-assign]
    starts = [begin + offset for offset, _, _ in model.phases()]
    workers = [count for _, count, _ in model.phases()]
    work = [
        s / workers[bisect.bisect_right(starts, t) - 1]
        for t, s in zip(arrivals, services, strict=True)
    ]
    lo, hi = begin + model.settle_s, begin + model.total_s
    window = sum(w for t, w in zip(arrivals, work, strict=True) if lo <= t < hi) / (hi - lo)
    peaks: dict[float, tuple[float, float]] = {}
    for seconds in OFFERED_WINDOWS:
        busiest, at, first, total = 0.0, lo, 0, 0.0
        for t, w in zip(arrivals, work, strict=True):
            total += w
            while arrivals[first] <= t - seconds:
                total -= work[first]
                first += 1
            if lo + seconds <= t < hi and total / seconds > busiest:
                busiest, at = total / seconds, t - begin
        peaks[seconds] = (busiest, at)
    return {"window": window, "peaks": peaks, "arrivals": [t - begin for t in arrivals]}


def _offered_main(cells: Sequence[str], loads: Sequence[float], policies: Sequence[str],
                  seeds: range) -> None:  # fmt: skip
    for cell in cells:
        for load in loads:
            for seed in seeds:
                work = offered_work(cell, load, seed)
                peaks = " ".join(
                    f"{seconds:g} s {peak:.2f}x (to {at:.1f} s)"
                    for seconds, (peak, at) in work["peaks"].items()
                )
                # The busiest 2 s, and the second after it that its backlog takes to drain.
                _, end = work["peaks"][max(OFFERED_WINDOWS)]
                busy = (end - max(OFFERED_WINDOWS), end + 1.0)
                refused = []
                for policy in policies:
                    outcomes = replay(cell, load, policy, seed, True)
                    counts = Counter(outcomes.values())
                    shed = sum(v for k, v in counts.items() if k in RULES) / counts.total()
                    times = [work["arrivals"][i] for i, o in outcomes.items() if o in RULES]
                    inside = sum(busy[0] <= t <= busy[1] for t in times)
                    there = f", {inside / len(times):.0%} of them then" if times else ""
                    refused.append(f"{policy} {shed:6.2%} {_rules(counts)}{there}".rstrip())
                print(
                    f"{cell:8} {load:4.1f}x seed {seed}: work {work['window']:.2f}x, busiest"
                    f" {peaks} | refused: {'; '.join(refused)}",
                    flush=True,
                )


def _p99(latencies: list[float]) -> float:
    return sorted(latencies)[int(0.99 * len(latencies))] if latencies else 0.0


def _replay_main(cells: Sequence[str], loads: Sequence[float], policies: Sequence[str],
                 seeds: range, at_slo: bool = False) -> None:  # fmt: skip
    for cell in cells:
        timeout = (_zoo.TIGHT_MODEL if cell == "tight" else model_named(cell)).slo_s
        timeout_or_none = timeout if at_slo else None
        for policy in policies:
            for load in loads:
                for seed in seeds:
                    on = replay(cell, load, policy, seed, True, timeout_or_none)
                    off = replay(cell, load, policy, seed, False, timeout_or_none)
                    counts = [Counter(run.values()) for run in (on, off)]
                    shed = [sum(v for k, v in c.items() if k in RULES) / len(on) for c in counts]
                    became = Counter(off[i] for i, rule in on.items() if rule == "predicted")
                    print(
                        f"{cell:8} {policy:12} {load:4.1f}x seed {seed}: shed {shed[0]:6.2%}"
                        f" {_rules(counts[0])} | off {shed[1]:6.2%} {_rules(counts[1])}"
                        f" | predicted, off: {dict(became) or '-'}",
                        flush=True,
                    )


RULES = ("predicted", "expired", "full", "standing")


def _rules(counts: Counter[str]) -> str:
    return " ".join(f"{rule}={counts[rule]}" for rule in RULES if counts[rule])


def _seeds(text: str) -> range:
    first, _, last = text.partition("-")
    return range(int(first), int(last or first) + 1)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    parser.add_argument("--loads", nargs="+", type=float, default=[0.5, 0.8, 1.5, 4.0])
    parser.add_argument("--policies", nargs="+",
                        choices=sorted({"issue", "fixed", "auto", *_zoo.POLICIES}),
                        help="default: issue fixed auto (with --replay: oracle_tight for tight,"
                        " else oracle auto)")  # fmt: skip
    parser.add_argument("--seeds", type=_seeds, default=range(1, 2))
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--no-off", action="store_true", help="skip the predictive=False runs")
    parser.add_argument("--json", type=argparse.FileType("w", encoding="utf-8"))
    parser.add_argument(
        "--replay",
        nargs="+",
        metavar="CELL",
        help="zoo cells call by call: tight (issue 41's), or a zoo model",
    )
    parser.add_argument(
        "--max-queue",
        type=int,
        metavar="N",
        help="with --replay: what the calls refused by the count or the standing limit became"
        " with every default queue N calls long",
    )
    parser.add_argument(
        "--queue-alone",
        action="store_true",
        help="with --replay: issue 41's bar, the same calls through the queue alone (no count,"
        " no standing limit, no predictive shedding): what it would really time out",
    )
    parser.add_argument(
        "--at-slo",
        action="store_true",
        help="with --queue-alone: the queue alone waits at most the model's SLO; with --replay"
        " alone: every guard's queue_timeout is the model's SLO",
    )
    parser.add_argument(
        "--offered",
        action="store_true",
        help="with --replay: the work each cell's calls bring (over the measured window, and"
        " its busiest 0.5, 1 and 2 s) beside what the guard refuses",
    )
    args = parser.parse_args(argv)
    if (args.max_queue is not None or args.queue_alone) and not args.replay:
        parser.error("--max-queue and --queue-alone go with --replay")
    if args.at_slo and not args.replay:
        parser.error("--at-slo goes with --replay")
    if args.offered and not args.replay:
        parser.error("--offered goes with --replay")
    if args.replay:
        logging.getLogger("fusion_guard").setLevel(logging.CRITICAL)  # the zoo's errors, logged
        for cell in args.replay:
            default = ["oracle_tight"] if cell == "tight" else ["oracle", "auto"]
            if args.offered:
                _offered_main([cell], args.loads, args.policies or default, args.seeds)
                continue
            if args.queue_alone:
                _alone_main([cell], args.loads, args.policies or default, args.seeds, args.at_slo)
                continue
            if args.max_queue is not None:
                _counterfactual_main(
                    [cell], args.loads, args.policies or default, args.seeds, args.max_queue
                )
                continue
            _replay_main([cell], args.loads, args.policies or default, args.seeds, args.at_slo)
        return
    args.policies = args.policies or ["issue", "fixed", "auto"]
    if not {"issue", "fixed", "auto"} >= set(args.policies):
        parser.error("--policies: issue, fixed or auto (the zoo's policies go with --replay)")
    rows: list[dict[str, Any]] = []
    for name in args.models:
        seconds = args.seconds * (20.0 if name == "slow" else 1.0)  # ~ as many calls
        for policy in args.policies:
            for load in args.loads:
                sheds, offs = [], []
                for seed in args.seeds:
                    cell = measure(name, load, policy, seed, seconds)
                    off = None if args.no_off else measure(name, load, policy, seed, seconds,
                                                           predictive=False)  # fmt: skip
                    sheds.append(cell.shed)
                    if off is not None:
                        offs.append(off.shed)
                    rules = " ".join(
                        f"{k}={v / cell.calls:.2%}" for k, v in sorted(cell.rules.items())
                    )
                    refused = max(sum(cell.rules.values()), 1)
                    print(
                        f"{name:8} {policy:6} {load:4.1f}x seed {seed}: shed {cell.shed:6.2%}"
                        + ("" if off is None else f" (off {off.shed:6.2%})")
                        + f" early {cell.early / refused:4.0%} goodput {cell.goodput:.2f}"
                        f" p99 {cell.p99 * 1000:7.1f} ms  [{rules}]",
                        flush=True,
                    )
                    row = asdict(cell)
                    row["shed"] = cell.shed
                    row["shed_off"] = None if off is None else off.shed
                    rows.append(row)
                if len(sheds) > 1:
                    off_range = f" (off {min(offs):.2%}-{max(offs):.2%})" if offs else ""
                    print(
                        f"{name:8} {policy:6} {load:4.1f}x:"
                        f" shed {min(sheds):.2%}-{max(sheds):.2%}{off_range}"
                    )
    if args.json is not None:
        json.dump(rows, args.json, indent=1)


if __name__ == "__main__":
    main()
