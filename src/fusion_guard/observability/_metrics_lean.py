"""The metrics of one process: plain Python counters and bucket arrays per tool (what the hot
path touches), turned into metric families only when Prometheus scrapes (a custom collector).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from .._observer import Outcome, ShedReason
from .._priority import PRIORITY_NAMES
from ._metric_definitions import (
    DEFAULT_PRIORITY,
    DEFINED,
    METRICS,
    OUTCOMES,
    SHED_REASONS,
    Buckets,
    LiveFigures,
    label_value,
)

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["LeanCollector", "LeanTool"]

_F = TypeVar("_F", bound="Metric")


class _Histogram:
    """Bucket counts (not cumulative; the scrape adds them up) and a running sum.

    ``zeros`` counts observations of exactly 0 apart (the uncontended queue wait): the hot path
    then skips the bucket search, and the scrape adds them to the bucket 0 falls in.
    """

    __slots__ = ("bounds", "counts", "total", "zero_bucket", "zeros")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.zeros = 0
        self.zero_bucket = bisect_left(bounds, 0.0)

    def observe(self, value: float) -> None:
        # bisect_left finds the first bound >= value: Prometheus' "le" bucket.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def cumulative(self) -> tuple[list[tuple[str, float]], float]:
        counts, total = list(self.counts), self.total  # a copy: the loop may record meanwhile
        counts[self.zero_bucket] += self.zeros
        running, buckets = 0, []
        for bound, count in zip((*self.bounds, float("inf")), counts, strict=True):
            running += count
            buckets.append((_le(bound), float(running)))
        return buckets, total


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class LeanTool:
    """One tool's figures as plain Python numbers: what the hot path touches.

    The tool's object is also its default priority's; ``for_priority`` makes each other
    priority's, a sibling with its own ``wait``, ``shed_counts`` and ``inflight`` (the figures
    shown by priority) sharing the rest, so that a call of any priority records through the same
    methods at the same cost. The scrape adds the siblings up where a metric has no priority."""

    __slots__ = (
        "_backend",
        "calls",
        "duration",
        "hints_ignored",
        "inflight",
        "limit",
        "live",
        "priority",
        "ranked",
        "retries",
        "retry_busy",
        "retry_limited",
        "shed_counts",
        "tool",
        "wait",
    )

    def __init__(self, tool: str, backend: dict[tuple[str, str], int], buckets: Buckets) -> None:
        self.tool = tool
        self.priority = DEFAULT_PRIORITY
        self.ranked: dict[str, LeanTool] = {DEFAULT_PRIORITY: self}  # shared by the siblings
        self.limit: int | None = None
        self.live: LiveFigures | None = None
        self.inflight = 0
        self.retries = 0
        self.hints_ignored = 0
        self.calls = dict.fromkeys(OUTCOMES, 0)
        self.shed_counts = dict.fromkeys(SHED_REASONS, 0)
        self.wait = _Histogram(buckets.queue_wait)
        self.duration = _Histogram(buckets.call_duration)
        self.retry_busy = _Histogram(buckets.retry_after)
        self.retry_limited = _Histogram(buckets.retry_after)
        self._backend = backend

    def for_priority(self, priority: str) -> LeanTool:
        """The figures of the tool's calls of ``priority`` (made once per priority)."""
        priority = str(priority)  # a Priority is its name
        ranked = self.ranked
        bound = ranked.get(priority)
        if bound is None:
            bound = ranked[priority] = LeanTool.__new__(LeanTool)
            for shared in LeanTool.__slots__:
                setattr(bound, shared, getattr(self, shared))
            bound.priority = priority
            bound.inflight = 0
            bound.shed_counts = dict.fromkeys(SHED_REASONS, 0)
            bound.wait = _Histogram(self.wait.bounds)
        return bound

    def shown(self) -> list[LeanTool]:
        """The priorities whose figures a scrape shows, highest first: the default's alone
        until a call of another priority is recorded, then every priority's (from 0, so that
        ``rate()`` sees their first calls)."""
        ranked = self.ranked
        others = [b for p, b in ranked.items() if p != DEFAULT_PRIORITY]
        if not any(b.wait.zeros or any(b.wait.counts) or any(b.shed_counts.values())
                   for b in others):  # fmt: skip
            return [ranked[DEFAULT_PRIORITY]]
        order = {p.value: rank for rank, p in enumerate(PRIORITY_NAMES)}
        return sorted(ranked.values(), key=lambda b: order.get(b.priority, len(order)))

    def set_limit(self, max_active: int) -> None:
        self.limit = max_active

    def watch(self, figures: LiveFigures) -> None:
        """Read ``inflight`` and ``queue_depth`` from ``figures`` at scrape time."""
        self.live = figures

    # The hot methods inline _Histogram.observe: a method call is a third of their cost.

    def admitted(self, queue_wait: float) -> None:
        self.inflight += 1
        wait = self.wait
        if queue_wait:
            wait.counts[bisect_left(wait.bounds, queue_wait)] += 1
            wait.total += queue_wait
        else:
            wait.zeros += 1

    def shed(self, reason: ShedReason, active: int, queued: int, retry_after: float) -> None:
        self.calls["shed"] += 1
        try:
            self.shed_counts[reason] += 1
        except KeyError:  # a reason outside the contract: shown, never raised
            self.shed_counts[reason] = 1
        hist = self.retry_busy
        hist.counts[bisect_left(hist.bounds, retry_after)] += 1
        hist.total += retry_after

    def rate_limited(self, scope: str, retry_after: float, key: str | None = None) -> None:
        self.calls["rate_limited"] += 1
        self.retry_limited.observe(retry_after)

    def retried(self) -> None:
        """A call arrived as a client's retry (its attempt number above 1)."""
        self.retries += 1

    def priority_hint_ignored(self) -> None:
        """A call's request carried a priority hint that names no priority."""
        self.hints_ignored += 1

    def finished(self, outcome: Outcome, duration: float | None) -> None:
        try:
            self.calls[outcome] += 1
        except KeyError:  # an outcome outside the contract: shown, never raised
            self.calls[outcome] = 1
        if duration is not None:
            self.inflight -= 1
            hist = self.duration
            hist.counts[bisect_left(hist.bounds, duration)] += 1
            hist.total += duration

    def backend_error(self, backend: str, allowed: bool) -> None:
        key = (backend, "allowed" if allowed else "denied")
        self._backend[key] = self._backend.get(key, 0) + 1

    def current_limit(self) -> int | None:
        """The slot count in force: the watched guard's own when it shows one (limits that
        adapt change it), else the ``max_active`` given to ``for_tool``."""
        limit: int | None = getattr(self.live, "max_active", self.limit)
        return limit

    def current(self) -> tuple[int, int]:
        """(inflight, queue depth): live from the guard when watched, else counted from events
        (no queue figure then)."""
        live = self.live
        if live is None:
            return max(sum(b.inflight for b in self.ranked.values()), 0), 0
        return live.active, live.queued


class LeanCollector:
    """Builds the metric families from every tool's numbers when Prometheus scrapes."""

    def __init__(self, namespace: str, buckets: Buckets) -> None:
        self.namespace = namespace
        self.buckets = buckets
        self.tools: dict[str, LeanTool] = {}
        self.backend: dict[tuple[str, str], int] = {}

    def tool(self, tool: str) -> LeanTool:
        bound = self.tools.get(tool)
        if bound is None:
            bound = self.tools[tool] = LeanTool(label_value(tool), self.backend, self.buckets)
        return bound

    def describe(self) -> Iterator[Metric]:
        # Declaring the names lets the registry refuse a second collector with the same ones.
        return iter(_Families(self.namespace).all())

    def collect(self) -> Iterator[Metric]:
        families = _Families(self.namespace)
        for bound in list(self.tools.values()):
            families.add_tool(bound)
        for (backend, decision), count in list(self.backend.items()):
            families.backend.add_metric([backend, decision], float(count))
        return iter(families.all())


class _Families:
    """The metric families of one scrape, one per definition in ``METRICS`` (in its order)."""

    def __init__(self, ns: str) -> None:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        made: dict[str, Metric] = {}

        def family(suffix: str, kind: Callable[..., _F]) -> _F:
            metric = DEFINED[suffix]
            made[suffix] = built = kind(f"{ns}_{suffix}", metric.help, labels=list(metric.labels))
            return built

        self.inflight = family("inflight", GaugeMetricFamily)
        self.queue = family("queue_depth", GaugeMetricFamily)
        self.limit = family("concurrency_limit", GaugeMetricFamily)
        self.calls = family("calls_total", CounterMetricFamily)
        self.shed = family("shed_total", CounterMetricFamily)
        self.retries = family("retries_total", CounterMetricFamily)
        self.hints = family("priority_hints_ignored_total", CounterMetricFamily)
        self.wait = family("queue_wait_seconds", HistogramMetricFamily)
        self.duration = family("call_duration_seconds", HistogramMetricFamily)
        self.retry = family("retry_after_seconds", HistogramMetricFamily)
        self.backend = family("backend_errors_total", CounterMetricFamily)
        self._all = [made[m.suffix] for m in METRICS]  # a definition left unmade fails here

    def all(self) -> list[Metric]:
        return self._all

    def add_tool(self, bound: LeanTool) -> None:
        name = bound.tool
        inflight, queued = bound.current()
        self.inflight.add_metric([name], float(inflight))
        self.queue.add_metric([name], float(queued))
        limit = bound.current_limit()
        if limit is not None:
            self.limit.add_metric([name], float(limit))
        for outcome, count in list(bound.calls.items()):
            self.calls.add_metric([name, outcome], float(count))
        shown = bound.shown()
        for ranked in shown:
            for reason, count in list(ranked.shed_counts.items()):
                self.shed.add_metric([name, reason, ranked.priority], float(count))
        self.retries.add_metric([name], float(bound.retries))
        self.hints.add_metric([name], float(bound.hints_ignored))
        for ranked in shown:
            _add_histogram(self.wait, [name, ranked.priority], ranked.wait)
        _add_histogram(self.duration, [name], bound.duration)
        _add_histogram(self.retry, [name, "SERVER_BUSY"], bound.retry_busy)
        _add_histogram(self.retry, [name, "RATE_LIMITED"], bound.retry_limited)


def _add_histogram(family: Metric, labels: list[str], histogram: _Histogram) -> None:
    buckets, total = histogram.cumulative()
    family.add_metric(labels, buckets, total)  # type: ignore[attr-defined]
