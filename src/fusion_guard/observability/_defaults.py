"""The one place where the guard's default observers are built.

``Guard`` calls ``default_observers(settings, registry)`` once, at construction, and adds the
user's ``observer=`` (if any) after what it returns: Prometheus metrics when ``settings.metrics``
is true (``FUSION_GUARD_METRICS=false`` turns them off), on ``registry`` or prometheus-client's
default registry, and the sampled log events (always: they cost nothing until a call is refused
or fails).

Metrics and logs come as one observer whose per-tool object calls both directly, skipping the
log side of ``admitted`` (never logged): cheaper on the hot path than a generic fan-out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._observer import Outcome, ShedReason
from ._events import LogEventObserver, _ToolEvents
from ._metrics import LiveFigures, PrometheusObserver, _ClientTool, _LeanTool

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from .._observer import GuardObserver
    from ..config._settings import GuardSettings

__all__ = ["default_observers"]


def default_observers(
    settings: GuardSettings, registry: CollectorRegistry | None
) -> tuple[GuardObserver, ...]:
    """The observers every guard gets by default: metrics (unless turned off) and logs."""
    events = LogEventObserver()
    if not settings.metrics:
        return (events,)
    return (_MetricsAndEvents(PrometheusObserver(registry), events),)


class _MetricsAndEvents:
    """A ``GuardObserver`` reporting to the metrics and to the log events."""

    __slots__ = ("events", "metrics")

    def __init__(self, metrics: PrometheusObserver, events: LogEventObserver) -> None:
        self.metrics = metrics
        self.events = events

    def for_tool(self, tool: str, *, max_active: int | None) -> _ToolMetricsAndEvents:
        return _ToolMetricsAndEvents(
            self.metrics.for_tool(tool, max_active=max_active),
            self.events.for_tool(tool, max_active=max_active),
        )

    def __repr__(self) -> str:
        return f"{self.metrics!r} + {self.events!r}"


class _ToolMetricsAndEvents:
    __slots__ = ("_events", "_metrics")

    def __init__(self, metrics: _LeanTool | _ClientTool, events: _ToolEvents) -> None:
        self._metrics = metrics
        self._events = events

    def watch(self, figures: LiveFigures) -> None:
        self._metrics.watch(figures)
        self._events.watch(figures)

    def admitted(self, queue_wait: float) -> None:
        self._metrics.admitted(queue_wait)

    def shed(self, reason: ShedReason, active: int, queued: int, retry_after: float) -> None:
        self._metrics.shed(reason, active, queued, retry_after)
        self._events.shed(reason, active, queued, retry_after)

    def rate_limited(self, scope: str, retry_after: float, key: str | None = None) -> None:
        self._metrics.rate_limited(scope, retry_after, key)
        self._events.rate_limited(scope, retry_after, key)

    def finished(self, outcome: Outcome, duration: float | None) -> None:
        self._metrics.finished(outcome, duration)
        self._events.finished(outcome, duration)

    def backend_error(self, backend: str, allowed: bool) -> None:
        self._metrics.backend_error(backend, allowed)
