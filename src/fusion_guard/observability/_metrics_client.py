"""The metrics in multiprocess mode: prometheus-client's metric objects, whose values live in
the mmap files that ``MultiProcessCollector`` adds up; children bound once per tool."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._observer import Outcome, ShedReason
from ._metric_definitions import (
    DEFAULT_PRIORITY,
    DEFINED,
    OUTCOMES,
    SHED_REASONS,
    Buckets,
    LiveFigures,
    label_value,
)

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

__all__ = ["ClientMetrics", "ClientTool"]


class ClientTool:
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
        metrics: ClientMetrics,
        tool: str,
        priority: str = DEFAULT_PRIORITY,
        ranked: dict[str, ClientTool] | None = None,
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

    def for_priority(self, priority: str) -> ClientTool:
        """The children of the tool's calls of ``priority`` (bound once per priority)."""
        priority = str(priority)  # a Priority is its name
        bound = self._ranked.get(priority)
        if bound is None:
            bound = ClientTool(self._metrics, self._tool, priority, self._ranked)
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


class ClientMetrics:
    """The prometheus-client metric objects (multiprocess mode), made once per registry from
    ``METRICS``."""

    def __init__(self, namespace: str, buckets: Buckets, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        made: set[str] = set()

        def defined(suffix: str, kind: str) -> tuple[str, str, list[str]]:
            metric = DEFINED[suffix]
            assert metric.kind == kind, suffix  # the table and the store agree on the type
            made.add(suffix)
            return f"{namespace}_{suffix}", metric.help, list(metric.labels)

        def gauge(suffix: str) -> Gauge:
            # livesum: the figures of live workers add up; a dead worker's drop out.
            return Gauge(*defined(suffix, "gauge"), registry=registry, multiprocess_mode="livesum")

        def counter(suffix: str) -> Counter:
            return Counter(*defined(suffix, "counter"), registry=registry)

        def histogram(suffix: str) -> Histogram:
            bounds = getattr(buckets, DEFINED[suffix].buckets or "")
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
        assert made == set(DEFINED), set(DEFINED) - made  # every definition is made
        self.backend_children: dict[tuple[str, bool], Counter] = {}
        self.tools: dict[str, ClientTool] = {}

    def tool(self, tool: str) -> ClientTool:
        bound = self.tools.get(tool)
        if bound is None:
            bound = self.tools[tool] = ClientTool(self, label_value(tool))
        return bound

    def backend_error(self, backend: str, allowed: bool) -> None:
        # Backends are few: each (backend, decision) child is bound once, on first use.
        child = self.backend_children.get((backend, allowed))
        if child is None:
            decision = "allowed" if allowed else "denied"
            child = self.backend_children[backend, allowed] = self.backend.labels(backend, decision)
        child.inc()
