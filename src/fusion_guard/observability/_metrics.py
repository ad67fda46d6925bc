"""Prometheus metrics for the guard: the names, labels and types of the
README's metric table (section "Observability").

Two ways to keep the figures, chosen once when the observer is made:

* One process (the usual case): plain Python counters and bucket arrays per tool, turned into
  metric families only when Prometheus scrapes (a custom collector). Recording a call is an
  attribute increment and a ``bisect``, several times cheaper than prometheus-client's
  ``Histogram.observe`` (about 0.6 us here, mostly its lock), which keeps a guarded call with
  metrics on within 3x a bare semaphore. ``inflight`` and ``queue_depth`` are read from the
  guard's live figures at scrape time when the guard registered them (``watch``).
* Multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set before ``prometheus_client`` is first
  imported): prometheus-client metric objects, whose values live in the mmap files that
  ``MultiProcessCollector`` adds up; the gauges declare ``livesum`` (a worker's figures drop
  out once ``mark_process_dead(pid)`` is called for it). Children are bound once per tool here too.

Counters are exact for a guard driven from one thread (one event loop), as guards are.
prometheus_client itself is imported only when an observer is made, so that ``import
fusion_guard`` stays light.
"""

from __future__ import annotations

import re
import weakref
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar, get_args

from .._exceptions import ConfigurationError
from .._observer import Outcome, ShedReason
from .._priority import DEFAULT_RANK, PRIORITY_NAMES

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

__all__ = [
    "CALL_DURATION_BUCKETS",
    "DEFAULT_PRIORITY",
    "OUTCOMES",
    "QUEUE_WAIT_BUCKETS",
    "RETRY_AFTER_BUCKETS",
    "SHED_REASONS",
    "LiveFigures",
    "PrometheusObserver",
    "label_value",
    "metric_names",
]

OUTCOMES: tuple[str, ...] = (
    "ok",
    "error",
    "internal_error",
    "shed",
    "rate_limited",
    "timeout",
    "cancelled",
)
SHED_REASONS: tuple[str, ...] = get_args(ShedReason)
#: The ``priority`` label of the calls without one (and of every call of a guard that keeps no
#: priorities): the default priority's name.
DEFAULT_PRIORITY: str = PRIORITY_NAMES[DEFAULT_RANK].value

# Queue waits are mostly zero or milliseconds; handler times span ms to a minute; retry_after
# runs from a few ms (busy) to minutes (slow rate limits).
QUEUE_WAIT_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
# From 1 to 6 s, where many tools' calls fall, no bound is more than 1.33x the one below:
# histogram_quantile interpolates inside a bucket, and a handler of n seconds (a little over a
# bound) reads at most 17 % high (with 1.0 then 2.5, a 1 s handler read as 1.75 s).
CALL_DURATION_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 10.0, 30.0, 60.0,
)  # fmt: skip
RETRY_AFTER_BUCKETS: tuple[float, ...] = (
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Definition:
    """One metric: both stores (the lean collector and prometheus-client's objects) are built
    from the table below, so they cannot disagree on a name, type, label or help text."""

    suffix: str
    kind: Literal["gauge", "counter", "histogram"]
    labels: tuple[str, ...]
    help: str
    buckets: Literal["queue_wait", "call_duration", "retry_after", None] = None


METRICS: tuple[_Definition, ...] = (
    _Definition("inflight", "gauge", ("tool",), "Calls executing now."),
    _Definition("queue_depth", "gauge", ("tool",), "Calls waiting for a slot."),
    _Definition("concurrency_limit", "gauge", ("tool",), "The slot count in force."),
    _Definition(
        "calls_total",
        "counter",
        ("tool", "outcome"),
        "Every call that reached the guard, once, by how it ended.",
    ),
    _Definition(
        "shed_total",
        "counter",
        ("tool", "reason", "priority"),
        "SERVER_BUSY answers, by reason and the refused call's priority.",
    ),
    _Definition(
        "retries_total",
        "counter",
        ("tool",),
        "Calls a client sent as a retry (attempt number above 1 in the request _meta).",
    ),
    _Definition(
        "priority_hints_ignored_total",
        "counter",
        ("tool",),
        "Calls whose request _meta priority hint named no priority (ignored).",
    ),
    _Definition(
        "queue_wait_seconds",
        "histogram",
        ("tool", "priority"),
        "Time from arrival to a slot, for admitted calls, by priority.",
        "queue_wait",
    ),
    _Definition(
        "call_duration_seconds",
        "histogram",
        ("tool",),
        "Handler time, for admitted calls.",
        "call_duration",
    ),
    _Definition(
        "retry_after_seconds",
        "histogram",
        ("tool", "code"),
        "The retry_after handed out, by error code.",
        "retry_after",
    ),
    _Definition(
        "backend_errors_total",
        "counter",
        ("backend", "decision"),
        "A shared backend failed; decision allowed (fail-open) or denied.",
    ),
)
_DEFINED = {metric.suffix: metric for metric in METRICS}
_F = TypeVar("_F", bound="Metric")
_NAMESPACE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")


def label_value(text: str) -> str:
    """``text`` as a label value the exposition can encode (UTF-8): a lone surrogate, which
    would fail every scrape, becomes its ``\\udxxx`` escape; other text is unchanged."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def metric_names(namespace: str = "fusion_guard") -> tuple[str, ...]:
    """Every metric name the observer exposes (counters with their ``_total``)."""
    return tuple(f"{namespace}_{metric.suffix}" for metric in METRICS)


class LiveFigures(Protocol):
    """What a guard shows of itself: read at scrape time for ``inflight`` and ``queue_depth``."""

    @property
    def active(self) -> int: ...

    @property
    def queued(self) -> int: ...


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


class _LeanTool:
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

    def __init__(self, tool: str, backend: dict[tuple[str, str], int], buckets: _Buckets) -> None:
        self.tool = tool
        self.priority = DEFAULT_PRIORITY
        self.ranked: dict[str, _LeanTool] = {DEFAULT_PRIORITY: self}  # shared by the siblings
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

    def for_priority(self, priority: str) -> _LeanTool:
        """The figures of the tool's calls of ``priority`` (made once per priority)."""
        priority = str(priority)  # a Priority is its name
        ranked = self.ranked
        bound = ranked.get(priority)
        if bound is None:
            bound = ranked[priority] = _LeanTool.__new__(_LeanTool)
            for shared in _LeanTool.__slots__:
                setattr(bound, shared, getattr(self, shared))
            bound.priority = priority
            bound.inflight = 0
            bound.shed_counts = dict.fromkeys(SHED_REASONS, 0)
            bound.wait = _Histogram(self.wait.bounds)
        return bound

    def shown(self) -> list[_LeanTool]:
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


class _Buckets:
    __slots__ = ("call_duration", "queue_wait", "retry_after")

    def __init__(
        self,
        queue_wait: Sequence[float],
        call_duration: Sequence[float],
        retry_after: Sequence[float],
    ) -> None:
        self.queue_wait = _check_buckets("queue_wait_buckets", queue_wait)
        self.call_duration = _check_buckets("call_duration_buckets", call_duration)
        self.retry_after = _check_buckets("retry_after_buckets", retry_after)


def _check_buckets(name: str, bounds: Sequence[float]) -> tuple[float, ...]:
    try:
        values = tuple(float(b) for b in bounds)
    except (TypeError, ValueError):
        values = ()
    finite = all(v == v and v not in (float("inf"), float("-inf")) for v in values)
    if not values or not finite or list(values) != sorted(set(values)):
        raise ConfigurationError(
            f"{name}={bounds!r} is invalid: expected a non-empty, strictly increasing sequence of "
            "finite numbers (the +Inf bucket is added automatically)"
        )
    return values


class _LeanCollector:
    """Builds the metric families from every tool's numbers when Prometheus scrapes."""

    def __init__(self, namespace: str, buckets: _Buckets) -> None:
        self.namespace = namespace
        self.buckets = buckets
        self.tools: dict[str, _LeanTool] = {}
        self.backend: dict[tuple[str, str], int] = {}

    def tool(self, tool: str) -> _LeanTool:
        bound = self.tools.get(tool)
        if bound is None:
            bound = self.tools[tool] = _LeanTool(label_value(tool), self.backend, self.buckets)
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
            metric = _DEFINED[suffix]
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

    def add_tool(self, bound: _LeanTool) -> None:
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


class _ClientTool:
    """One tool's prometheus-client children, bound once (multiprocess mode)."""

    __slots__ = (
        "_backend",
        "_busy",
        "_calls",
        "_duration",
        "_hints",
        "_inflight",
        "_limit",
        "_limited",
        "_metrics",
        "_queue",
        "_ranked",
        "_retries",
        "_shed",
        "_tool",
        "_wait",
        "live",
    )

    def __init__(
        self,
        metrics: _ClientMetrics,
        tool: str,
        priority: str = DEFAULT_PRIORITY,
        ranked: dict[str, _ClientTool] | None = None,
    ) -> None:
        self.live: LiveFigures | None = None
        self._metrics = metrics
        self._tool = tool
        # Each priority's children (this one's for ``priority``), shared by the siblings.
        self._ranked = {priority: self} if ranked is None else ranked
        self._inflight = metrics.inflight.labels(tool)
        self._queue = metrics.queue.labels(tool)
        self._limit = metrics.limit.labels(tool)
        self._calls = {o: metrics.calls.labels(tool, o) for o in OUTCOMES}
        self._shed = {r: metrics.shed.labels(tool, r, priority) for r in SHED_REASONS}
        self._retries = metrics.retries.labels(tool)
        self._hints = metrics.hints.labels(tool)
        self._wait = metrics.wait.labels(tool, priority)
        self._duration = metrics.duration.labels(tool)
        self._busy = metrics.retry.labels(tool, "SERVER_BUSY")
        self._limited = metrics.retry.labels(tool, "RATE_LIMITED")
        self._backend = metrics.backend_error

    def set_limit(self, max_active: int) -> None:
        self._limit.set(max_active)

    def for_priority(self, priority: str) -> _ClientTool:
        """The children of the tool's calls of ``priority`` (bound once per priority)."""
        priority = str(priority)  # a Priority is its name
        bound = self._ranked.get(priority)
        if bound is None:
            bound = _ClientTool(self._metrics, self._tool, priority, self._ranked)
            bound.live = self.live
            self._ranked[priority] = bound
        return bound

    def watch(self, figures: LiveFigures) -> None:
        """Refresh ``queue_depth`` from ``figures`` at every event (there is no scrape-time hook
        in a worker process), whichever priority's children record it."""
        for bound in self._ranked.values():
            bound.live = figures

    def _sample_queue(self, queued: int | None = None) -> None:
        live = self.live
        if live is not None:
            self._queue.set(live.queued)
        elif queued is not None:
            self._queue.set(queued)

    def admitted(self, queue_wait: float) -> None:
        self._inflight.inc()
        self._wait.observe(queue_wait)
        self._sample_queue()

    def shed(self, reason: ShedReason, active: int, queued: int, retry_after: float) -> None:
        self._calls["shed"].inc()
        child = self._shed.get(reason)
        if child is not None:
            child.inc()
        self._busy.observe(retry_after)
        self._sample_queue(queued)

    def rate_limited(self, scope: str, retry_after: float, key: str | None = None) -> None:
        self._calls["rate_limited"].inc()
        self._limited.observe(retry_after)

    def retried(self) -> None:
        self._retries.inc()

    def priority_hint_ignored(self) -> None:
        self._hints.inc()

    def finished(self, outcome: Outcome, duration: float | None) -> None:
        child = self._calls.get(outcome)
        if child is not None:
            child.inc()
        if duration is not None:
            self._inflight.dec()
            self._duration.observe(duration)
        self._sample_queue()

    def backend_error(self, backend: str, allowed: bool) -> None:
        self._backend(backend, allowed)


class _ClientMetrics:
    """The prometheus-client metric objects (multiprocess mode), made once per registry from
    ``METRICS``."""

    def __init__(self, namespace: str, buckets: _Buckets, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        made: set[str] = set()

        def defined(suffix: str, kind: str) -> tuple[str, str, list[str]]:
            metric = _DEFINED[suffix]
            assert metric.kind == kind, suffix  # the table and the store agree on the type
            made.add(suffix)
            return f"{namespace}_{suffix}", metric.help, list(metric.labels)

        def gauge(suffix: str) -> Gauge:
            # livesum: the figures of live workers add up; a dead worker's drop out.
            return Gauge(*defined(suffix, "gauge"), registry=registry, multiprocess_mode="livesum")

        def counter(suffix: str) -> Counter:
            return Counter(*defined(suffix, "counter"), registry=registry)

        def histogram(suffix: str) -> Histogram:
            bounds = getattr(buckets, _DEFINED[suffix].buckets or "")
            return Histogram(*defined(suffix, "histogram"), registry=registry, buckets=bounds)

        self.inflight = gauge("inflight")
        self.queue = gauge("queue_depth")
        self.limit = gauge("concurrency_limit")
        self.calls = counter("calls_total")
        self.shed = counter("shed_total")
        self.retries = counter("retries_total")
        self.hints = counter("priority_hints_ignored_total")
        self.wait = histogram("queue_wait_seconds")
        self.duration = histogram("call_duration_seconds")
        self.retry = histogram("retry_after_seconds")
        self.backend = counter("backend_errors_total")
        assert made == set(_DEFINED), set(_DEFINED) - made  # every definition is made
        self.backend_children: dict[tuple[str, bool], Counter] = {}
        self.tools: dict[str, _ClientTool] = {}

    def tool(self, tool: str) -> _ClientTool:
        bound = self.tools.get(tool)
        if bound is None:
            bound = self.tools[tool] = _ClientTool(self, label_value(tool))
        return bound

    def backend_error(self, backend: str, allowed: bool) -> None:
        # Backends are few: each (backend, decision) child is bound once, on first use.
        child = self.backend_children.get((backend, allowed))
        if child is None:
            decision = "allowed" if allowed else "denied"
            child = self.backend_children[backend, allowed] = self.backend.labels(backend, decision)
        child.inc()


_Store = _LeanCollector | _ClientMetrics
# One store per (registry, namespace): two guards on one registry share the figures instead of
# colliding on the metric names.
_STORES: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, _Store]] = (
    weakref.WeakKeyDictionary()
)


def multiprocess_enabled() -> bool:
    """Whether prometheus-client keeps its values in ``PROMETHEUS_MULTIPROC_DIR`` files."""
    from prometheus_client import values

    return values.ValueClass is not values.MutexValue


class PrometheusObserver:
    """Prometheus metrics for every guarded tool (a ``GuardObserver``).

    ``registry`` defaults to prometheus-client's global ``REGISTRY``; pass your own to keep
    several apps (or tests) apart. Observers made on the same registry and namespace share one
    set of figures. ``namespace`` prefixes every metric name (``fusion_guard`` by default: the
    dashboard and alert rules expect it). ``multiprocess`` defaults to whether
    ``PROMETHEUS_MULTIPROC_DIR`` was set when prometheus_client was imported.
    """

    __slots__ = ("_store", "multiprocess", "namespace", "registry")

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        namespace: str = "fusion_guard",
        multiprocess: bool | None = None,
        queue_wait_buckets: Sequence[float] = QUEUE_WAIT_BUCKETS,
        call_duration_buckets: Sequence[float] = CALL_DURATION_BUCKETS,
        retry_after_buckets: Sequence[float] = RETRY_AFTER_BUCKETS,
    ) -> None:
        if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
            raise ConfigurationError(
                f"namespace={namespace!r} is invalid: expected a Prometheus metric name prefix "
                "(letters, digits, '_' or ':', not starting with a digit)"
            )
        if registry is None:
            from prometheus_client import REGISTRY

            registry = REGISTRY
        buckets = _Buckets(queue_wait_buckets, call_duration_buckets, retry_after_buckets)
        self.registry = registry
        self.namespace = namespace
        self.multiprocess = multiprocess_enabled() if multiprocess is None else bool(multiprocess)
        self._store = _store_for(registry, namespace, buckets, self.multiprocess)

    def for_tool(self, tool: str, *, max_active: int | None) -> _LeanTool | _ClientTool:
        """The tool's bound metrics (the same object for the same tool); sets its
        ``concurrency_limit`` to ``max_active`` (none shown when the tool has no limit)."""
        bound = self._store.tool(tool)
        if max_active is not None:
            bound.set_limit(max_active)
        return bound

    def __repr__(self) -> str:
        mode = "multiprocess" if self.multiprocess else "in-process"
        return f"PrometheusObserver(namespace={self.namespace!r}, {mode})"


def _store_for(
    registry: CollectorRegistry, namespace: str, buckets: _Buckets, multiprocess: bool
) -> _Store:
    stores = _STORES.setdefault(registry, {})
    store = stores.get(namespace)
    wanted = _ClientMetrics if multiprocess else _LeanCollector
    if store is not None:
        if not isinstance(store, wanted):
            raise ConfigurationError(
                f"multiprocess={multiprocess!r} conflicts with the observer already made on this "
                f"registry for namespace {namespace!r}: use one mode per registry"
            )
        return store
    try:
        if multiprocess:
            store = _ClientMetrics(namespace, buckets, registry)
        else:
            store = _LeanCollector(namespace, buckets)
            registry.register(store)
    except ValueError as exc:  # a metric of the same name was registered by someone else
        raise ConfigurationError(
            f"namespace={namespace!r}: the registry already has metrics with these names ({exc}); "
            "pass another registry= or namespace="
        ) from exc
    stores[namespace] = store
    return store
