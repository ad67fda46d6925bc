"""The tool zoo's models: tools that do not look like the demo's (issue 41, docs/zoo.md).

Each model is a frozen dataclass of its parameters that documents its true capacity (calls/s)
and its true parallel worker count (what an operator who knew the tool would give
``max_active``: the oracle's fixed limit). ``draw(rng)`` draws one call's work (its service
time, its argument), once per arrival, so that every policy in a run serves the very same calls;
``make_tool()`` makes a fresh instance (its pool, its bucket), one per policy: the simulated
tools of ``_zoo_tools.py``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from ._tool import ToolModel
from ._zoo_tools import (
    FAST_ERROR_S,
    BackendDown,
    BadInput,
    CpuTool,
    FailFastTool,
    Job,
    PoolExhausted,
    QueueingTool,
    SlidingUpstreamTool,
    UpstreamRateLimited,
    UpstreamTool,
    WindowUpstreamTool,
    ZooTool,
    lognormal,
)

__all__ = [
    "MODELS",
    "ArgumentCost",
    "BackendDown",
    "BadInput",
    "BimodalCache",
    "CpuThreads",
    "FailFastPool",
    "HeavyTail",
    "Job",
    "PoolExhausted",
    "QueueingPool",
    "ShiftingPool",
    "SlowLLM",
    "UpstreamRateLimited",
    "UpstreamApi",
    "UpstreamFast",
    "UpstreamLong",
    "UpstreamSliding",
    "UpstreamSlow",
    "UpstreamWindow",
    "ZooModel",
    "ZooTool",
    "model_named",
]


@dataclass(frozen=True, kw_only=True)
class ZooModel:
    """One kind of tool. ``workers``: the true parallel worker count (the oracle's fixed limit);
    ``capacity_rps``: the calls per second it really serves at best; ``slo_s``: the latency an
    answer counts as good within; ``client_timeout_s``: when a caller gives up (cancels);
    ``settle_s``: the start left out of the figures (a limit finding the tool);
    ``duration_s``: the measured window after it.

    A model states only what makes it different: its service times (``mean_s``, ``draw``; the
    log-normal ones through ``_LogNormalService``), its tool (``make_tool``; the queueing ones
    through ``_QueueingModel``) and ``parameters``."""

    name: ClassVar[str]
    title: ClassVar[str]
    overload_errors: ClassVar[tuple[type[Exception], ...]] = ()
    """The exceptions this tool raises when overloaded (for ``Guard(overload_errors=...)``)."""

    workers: int
    slo_s: float
    client_timeout_s: float
    settle_s: float = 3.0
    duration_s: float = 12.0

    @property
    def mean_s(self) -> float:
        """A call's mean service time (seconds)."""
        raise NotImplementedError

    @property
    def capacity_rps(self) -> float:
        return self.workers / self.mean_s

    def phases(self) -> Sequence[tuple[float, int, float]]:
        """(seconds from the start, true worker count, capacity in calls/s) of each phase."""
        return ((0.0, self.workers, self.capacity_rps),)

    def draw(self, rng: random.Random) -> Job:
        raise NotImplementedError

    def make_tool(self) -> ZooTool:
        raise NotImplementedError

    def parameters(self) -> str:
        """Its parameters in one line (the table's caption and docs/zoo.md)."""
        raise NotImplementedError

    @property
    def total_s(self) -> float:
        return self.settle_s + self.duration_s

    def workers_at(self, offset: float) -> int:
        """The true worker count ``offset`` seconds from the start."""
        workers = self.workers
        for begin, count, _ in self.phases():
            if offset >= begin:
                workers = count
        return workers


@dataclass(frozen=True, kw_only=True)
class _LogNormalService(ZooModel):
    """Log-normal service times of mean ``mean_s`` (seconds); each model gives its defaults.
    The field stands in for ``ZooModel.mean_s``: a class default always shadows the property,
    which a field without one would not (its value could not be set)."""

    mean_s: float = 0.040
    sigma: float = 0.5

    def draw(self, rng: random.Random) -> Job:
        return Job(lognormal(rng, self.mean_s, self.sigma))

    def service_text(self) -> str:
        """Its service times, as ``parameters`` puts them."""
        return f"log-normal {self.mean_s * 1000:g} ms (sigma {self.sigma:g})"


@dataclass(frozen=True, kw_only=True)
class _QueueingModel(ZooModel):
    """A tool whose calls queue inside for its workers and slow each other
    (``QueueingTool``)."""

    contention_scale: float = 100.0

    def make_tool(self) -> ZooTool:
        return QueueingTool(self.workers, self.contention_scale)


@dataclass(frozen=True, kw_only=True)
class QueueingPool(_LogNormalService, _QueueingModel):
    """A database pool that queues: calls beyond the pool wait inside and slow each other."""

    name: ClassVar[str] = "db_pool"
    title: ClassVar[str] = "database pool that queues"
    workers: int = 4
    contention_scale: float = 50.0
    slo_s: float = 0.25
    client_timeout_s: float = 1.0

    def parameters(self) -> str:
        return (
            f"{self.workers} connections, {self.service_text()}, each call waiting inside"
            f" slows service by {100 / self.contention_scale:g} %"
        )


@dataclass(frozen=True, kw_only=True)
class FailFastPool(_LogNormalService):
    """A pool that raises ``PoolExhausted`` at once (1 ms) when every connection is busy."""

    name: ClassVar[str] = "fail_fast"
    title: ClassVar[str] = "pool that fails fast"
    overload_errors: ClassVar[tuple[type[Exception], ...]] = (PoolExhausted,)
    workers: int = 4
    sigma: float = 0.3
    slo_s: float = 0.25
    client_timeout_s: float = 1.0

    def make_tool(self) -> ZooTool:
        return FailFastTool(self.workers)

    def parameters(self) -> str:
        return (
            f"{self.workers} connections, {self.service_text()}; PoolExhausted after"
            f" {FAST_ERROR_S * 1000:g} ms when all are busy"
        )


@dataclass(frozen=True, kw_only=True)
class UpstreamApi(_LogNormalService):
    """An upstream API with its own rate limit (a token bucket): past it, 429 within 5 ms. Its
    true worker count is the concurrency its rate sustains: rate x mean latency."""

    name: ClassVar[str] = "upstream"
    title: ClassVar[str] = "upstream API with its own rate limit"
    overload_errors: ClassVar[tuple[type[Exception], ...]] = (UpstreamRateLimited,)
    rate: float = 50.0
    burst: int = 10
    mean_s: float = 0.080
    sigma: float = 0.4
    reject_s: float = 0.005
    workers: int = 4
    slo_s: float = 0.4
    client_timeout_s: float = 2.0

    @property
    def capacity_rps(self) -> float:
        return self.rate

    def make_tool(self) -> ZooTool:
        return UpstreamTool(self.rate, self.burst, self.reject_s)

    def parameters(self) -> str:
        return (
            f"{self.rate:g} calls/s (burst {self.burst}), {self.service_text()};"
            f" UpstreamRateLimited (429) after {self.reject_s * 1000:g} ms past the rate"
        )


@dataclass(frozen=True, kw_only=True)
class UpstreamFast(UpstreamApi):
    """A variant of the upstream API the pacing was not tuned on: a faster API with a twice
    higher rate and almost no burst, answering 429 in 1 ms."""

    name: ClassVar[str] = "upstream_fast"
    title: ClassVar[str] = "upstream API, fast, small burst"
    rate: float = 100.0
    burst: int = 2
    mean_s: float = 0.030
    sigma: float = 0.3
    reject_s: float = 0.001
    workers: int = 3
    slo_s: float = 0.2
    client_timeout_s: float = 1.0


@dataclass(frozen=True, kw_only=True)
class UpstreamSlow(UpstreamApi):
    """A variant of the upstream API the pacing was not tuned on: a slow API of a few calls a
    second with a large burst, answering 429 in 20 ms."""

    name: ClassVar[str] = "upstream_slow"
    title: ClassVar[str] = "upstream API, slow, large burst"
    rate: float = 8.0
    burst: int = 30
    mean_s: float = 0.500
    sigma: float = 0.5
    reject_s: float = 0.020
    workers: int = 4
    slo_s: float = 2.0
    client_timeout_s: float = 5.0
    settle_s: float = 10.0
    duration_s: float = 30.0


@dataclass(frozen=True, kw_only=True)
class UpstreamWindow(UpstreamApi):
    """A variant of the upstream API the pacing was not tuned on: a fixed-window limiter (its
    quota of a second granted at once, at the window's start), slower and heavier-tailed calls,
    429 in 20 ms."""

    name: ClassVar[str] = "upstream_window"
    title: ClassVar[str] = "upstream API, fixed-window limit"
    rate: float = 40.0
    window_s: float = 1.0
    mean_s: float = 0.120
    sigma: float = 0.6
    reject_s: float = 0.020
    workers: int = 5
    slo_s: float = 0.6
    client_timeout_s: float = 2.0

    def make_tool(self) -> ZooTool:
        return WindowUpstreamTool(self.rate, self.window_s, self.reject_s)

    def parameters(self) -> str:
        return (
            f"fixed window of {self.rate * self.window_s:g} calls per {self.window_s:g} s,"
            f" {self.service_text()}; UpstreamRateLimited (429) after"
            f" {self.reject_s * 1000:g} ms past the quota"
        )


@dataclass(frozen=True, kw_only=True)
class UpstreamSliding(UpstreamApi):
    """A variant of the upstream API held out from the pacing's tuning: a sliding-window log
    (no more than ``rate x window_s`` calls in any trailing ``window_s``), heavy-tailed calls,
    429 in 10 ms."""

    name: ClassVar[str] = "upstream_sliding"
    title: ClassVar[str] = "upstream API, sliding-window limit"
    rate: float = 60.0
    window_s: float = 0.5
    mean_s: float = 0.060
    sigma: float = 0.8
    reject_s: float = 0.010
    workers: int = 4
    slo_s: float = 0.4
    client_timeout_s: float = 2.0

    def make_tool(self) -> ZooTool:
        return SlidingUpstreamTool(self.rate, self.window_s, self.reject_s)

    def parameters(self) -> str:
        return (
            f"sliding window of {self.rate * self.window_s:g} calls per {self.window_s:g} s,"
            f" {self.service_text()}; UpstreamRateLimited (429) after"
            f" {self.reject_s * 1000:g} ms past the quota"
        )


@dataclass(frozen=True, kw_only=True)
class UpstreamLong(UpstreamApi):
    """A variant of the upstream API held out from the pacing's tuning: a low rate of long
    calls (the rate needs more calls in flight than the burst), 429 in 3 ms."""

    name: ClassVar[str] = "upstream_long"
    title: ClassVar[str] = "upstream API, long calls, small burst"
    rate: float = 25.0
    burst: int = 5
    mean_s: float = 0.200
    sigma: float = 0.3
    reject_s: float = 0.003
    workers: int = 5
    slo_s: float = 0.8
    client_timeout_s: float = 3.0
    settle_s: float = 5.0
    duration_s: float = 15.0


@dataclass(frozen=True, kw_only=True)
class UpstreamTight(UpstreamApi):
    """A variant of the upstream API held out from the timed pacing's work (issue 41): a token
    bucket of no burst at all (one token), a lower rate of mid-length calls, 429 in 2 ms."""

    name: ClassVar[str] = "upstream_tight"
    title: ClassVar[str] = "upstream API, no burst"
    rate: float = 30.0
    burst: int = 1
    mean_s: float = 0.100
    sigma: float = 0.5
    reject_s: float = 0.002
    workers: int = 3
    slo_s: float = 0.5
    client_timeout_s: float = 2.0


@dataclass(frozen=True, kw_only=True)
class BimodalCache(_QueueingModel):
    """A cache: most calls hit (uniform 1-2 ms), some miss (uniform 100-300 ms); both hold one
    of its connections, calls beyond them queue."""

    name: ClassVar[str] = "cache"
    title: ClassVar[str] = "cache, bimodal latency"
    workers: int = 4
    miss: float = 0.15
    hit_s: tuple[float, float] = (0.001, 0.002)
    miss_s: tuple[float, float] = (0.100, 0.300)
    slo_s: float = 0.5
    client_timeout_s: float = 2.0

    @property
    def mean_s(self) -> float:
        return (1 - self.miss) * sum(self.hit_s) / 2 + self.miss * sum(self.miss_s) / 2

    def draw(self, rng: random.Random) -> Job:
        low, high = self.miss_s if rng.random() < self.miss else self.hit_s
        return Job(rng.uniform(low, high))

    def parameters(self) -> str:
        return (
            f"{self.workers} connections; {1 - self.miss:.0%} hits of"
            f" {self.hit_s[0] * 1000:g}-{self.hit_s[1] * 1000:g} ms, {self.miss:.0%} misses of"
            f" {self.miss_s[0] * 1000:g}-{self.miss_s[1] * 1000:g} ms (mean"
            f" {self.mean_s * 1000:.1f} ms)"
        )


@dataclass(frozen=True, kw_only=True)
class ArgumentCost(_QueueingModel):
    """One tool, two kinds of call: cheap lookups and expensive queries, by their arguments."""

    name: ClassVar[str] = "arg_cost"
    title: ClassVar[str] = "argument-dependent cost"
    workers: int = 4
    expensive: float = 0.2
    cheap_s: float = 0.005
    expensive_s: float = 0.150
    sigma: float = 0.3
    slo_s: float = 0.5
    client_timeout_s: float = 2.0

    @property
    def mean_s(self) -> float:
        return (1 - self.expensive) * self.cheap_s + self.expensive * self.expensive_s

    def draw(self, rng: random.Random) -> Job:
        mean = self.expensive_s if rng.random() < self.expensive else self.cheap_s
        return Job(lognormal(rng, mean, self.sigma))

    def parameters(self) -> str:
        return (
            f"{self.workers} workers; {1 - self.expensive:.0%} lookups of"
            f" {self.cheap_s * 1000:g} ms, {self.expensive:.0%} queries of"
            f" {self.expensive_s * 1000:g} ms (log-normal, sigma {self.sigma:g}; mean"
            f" {self.mean_s * 1000:.0f} ms)"
        )


@dataclass(frozen=True, kw_only=True)
class CpuThreads(_LogNormalService):
    """CPU-bound work of a sync handler in a thread pool larger than the cores: the threads
    share the cores in 5 ms slices, so its true worker count is the cores."""

    name: ClassVar[str] = "cpu_threads"
    title: ClassVar[str] = "CPU-bound work in a thread pool"
    threads: int = 8
    workers: int = 2
    """The cores the work runs on (it releases the GIL, as numpy does)."""
    mean_s: float = 0.025
    sigma: float = 0.3
    slice_s: float = 0.005
    slo_s: float = 0.25
    client_timeout_s: float = 1.0

    def make_tool(self) -> ZooTool:
        return CpuTool(self.threads, self.workers, self.slice_s)

    def parameters(self) -> str:
        return (
            f"{self.threads} threads on {self.workers} cores, log-normal"
            f" {self.mean_s * 1000:g} ms of CPU (sigma {self.sigma:g}) in"
            f" {self.slice_s * 1000:g} ms slices; a thread, once running, is not cancelled"
        )


@dataclass(frozen=True, kw_only=True)
class HeavyTail(_LogNormalService, _QueueingModel):
    """A heavy tail: log-normal service with sigma 1.1."""

    name: ClassVar[str] = "heavy_tail"
    title: ClassVar[str] = "heavy tail"
    workers: int = 4
    sigma: float = 1.1
    slo_s: float = 0.6
    client_timeout_s: float = 2.0

    def parameters(self) -> str:
        # The demo's tool model computes the same uncontended p99 for its own log-normal.
        p99_s = ToolModel(mean_service_s=self.mean_s, sigma=self.sigma).uncontended_p99_s
        return (
            f"{self.workers} workers, log-normal {self.mean_s * 1000:g} ms (sigma"
            f" {self.sigma:g}; uncontended p99 {p99_s * 1000:.0f} ms)"
        )


@dataclass(frozen=True, kw_only=True)
class SlowLLM(_QueueingModel):
    """A tool that calls an LLM: 1-5 s a call (uniform), at most ``workers`` requests at once
    at the provider, the rest waiting in its gateway."""

    name: ClassVar[str] = "slow_llm"
    title: ClassVar[str] = "slow LLM-backed tool"
    workers: int = 8
    service_s: tuple[float, float] = (1.0, 5.0)
    slo_s: float = 10.0
    client_timeout_s: float = 30.0
    settle_s: float = 30.0
    duration_s: float = 120.0

    @property
    def mean_s(self) -> float:
        return sum(self.service_s) / 2

    def draw(self, rng: random.Random) -> Job:
        return Job(rng.uniform(*self.service_s))

    def parameters(self) -> str:
        return (
            f"{self.workers} requests at once, uniform {self.service_s[0]:g}-"
            f"{self.service_s[1]:g} s a call"
        )


@dataclass(frozen=True, kw_only=True)
class ShiftingPool(_LogNormalService, _QueueingModel):
    """Capacity shifting under a heavy tail: the pool's workers go through ``shifts`` (8 -> 1
    -> 4), ``phase_s`` each; offered load follows the current capacity."""

    name: ClassVar[str] = "shifting"
    title: ClassVar[str] = "capacity shifting, heavy tail"
    shifts: tuple[int, ...] = (8, 1, 4)
    phase_s: float | tuple[float, ...] = 8.0
    """Each phase's length (one for all, or one per phase)."""
    workers: int = 8
    mean_s: float = 0.050
    sigma: float = 1.0
    slo_s: float = 0.6
    client_timeout_s: float = 2.0
    settle_s: float = 3.0
    duration_s: float = 21.0

    def __post_init__(self) -> None:
        # Derived, not chosen: the first phase's count, and the run's length less the settling.
        object.__setattr__(self, "workers", self.shifts[0])
        object.__setattr__(self, "duration_s", sum(self.lengths) - self.settle_s)

    @property
    def lengths(self) -> tuple[float, ...]:
        if isinstance(self.phase_s, tuple):
            return self.phase_s
        return (self.phase_s,) * len(self.shifts)

    def phases(self) -> Sequence[tuple[float, int, float]]:
        begins = [sum(self.lengths[:i]) for i in range(len(self.shifts))]
        return tuple((b, n, n / self.mean_s) for b, n in zip(begins, self.shifts, strict=True))

    def parameters(self) -> str:
        return (
            f"{' -> '.join(map(str, self.shifts))} workers,"
            f" {'/'.join(f'{x:g}' for x in self.lengths)} s, {self.service_text()}"
        )


#: The zoo, in the table's order.
MODELS: tuple[ZooModel, ...] = (
    QueueingPool(),
    FailFastPool(),
    UpstreamApi(),
    UpstreamFast(),
    UpstreamSlow(),
    UpstreamWindow(),
    UpstreamSliding(),
    UpstreamLong(),
    UpstreamTight(),
    BimodalCache(),
    ArgumentCost(),
    CpuThreads(),
    HeavyTail(),
    SlowLLM(),
    ShiftingPool(),
)


def model_named(name: str) -> ZooModel:
    """The zoo's model called ``name`` (ValueError naming the known ones)."""
    for model in MODELS:
        if model.name == name:
            return model
    raise ValueError(
        f"{name!r} is no model of the zoo; expected one of {', '.join(m.name for m in MODELS)}"
    )
