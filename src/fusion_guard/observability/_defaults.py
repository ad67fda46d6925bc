"""The one place where the guard's default observers are built.

``Guard`` calls ``default_observers(settings, registry)`` once, at construction, and adds the
user's ``observer=`` (if any) after what it returns: Prometheus metrics when ``settings.metrics``
is true (``FUSION_GUARD_METRICS=false`` turns them off), on ``registry`` or prometheus-client's
default registry, and the sampled log events (always: they cost nothing until a call is refused
or fails).

Metrics and logs come as one observer whose per-tool object is the guard's contained fan-out
(``ToolObservers``), skipping the log side of ``admitted`` (never logged): no second layer on the
hot path. With the metrics off it is the log events' own per-tool object: a refusal reaches
them in one step.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .._observer import Outcome, ToolObservers, observer_failed
from .._priority import Priority
from ._events import LogEventObserver, _PriorityEvents, _ToolEvents
from ._metrics import PrometheusObserver
from ._metrics_client import ClientTool
from ._metrics_lean import LeanTool

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from ..config._settings import GuardSettings

__all__ = ["Defaults", "default_observers"]


def default_observers(
    settings: GuardSettings, registry: CollectorRegistry | None
) -> tuple[Defaults]:
    """The observers every guard gets by default: metrics (unless turned off) and logs, as one
    observer (``flush`` logs the summaries the sampled events still owe, at the guard's close)."""
    metrics = PrometheusObserver(registry) if settings.metrics else None
    return (Defaults(metrics, LogEventObserver()),)


class Defaults:
    """A ``GuardObserver`` reporting to the metrics (None: off) and to the log events."""

    __slots__ = ("events", "metrics")

    def __init__(self, metrics: PrometheusObserver | None, events: LogEventObserver) -> None:
        self.metrics = metrics
        self.events = events

    def for_tool(self, tool: str, *, max_active: int | None) -> _ToolDefaults | _ToolEvents:
        events = self.events.for_tool(tool, max_active=max_active)
        metrics = self.metrics
        if metrics is None:  # the log events alone: no fan-out of one
            return events
        return _ToolDefaults(metrics.for_tool(tool, max_active=max_active), events)

    def flush(self) -> None:
        """Log the summaries the sampled log events still owe (when the guard closes)."""
        self.events.flush()

    def __repr__(self) -> str:
        return repr(self.events) if self.metrics is None else f"{self.metrics!r} + {self.events!r}"


class _ToolDefaults(ToolObservers):
    """One tool's metrics (None: off) and log events: the contained fan-out, except that
    ``admitted``, the one event every admitted call reports and the logs ignore, goes to the
    metrics alone (nowhere when they are off)."""

    __slots__ = ("_events", "_metrics", "_tool_events")

    def __init__(
        self, metrics: LeanTool | ClientTool | None, events: _ToolEvents | _PriorityEvents
    ) -> None:
        super().__init__((events,) if metrics is None else (metrics, events))
        self._metrics = metrics
        self._events = events
        # The tool's own log events (not a priority's view of them), which tell when they owe
        # nothing (``due``); None: always told.
        self._tool_events = events if type(events) is _ToolEvents else None

    def for_priority(self, priority: Priority) -> _ToolDefaults:
        """The metrics and log events of the tool's calls of ``priority``."""
        metrics, events = self._metrics, self._events
        assert isinstance(events, _ToolEvents)  # the tool's own (bound per priority once)
        return _ToolDefaults(
            None if metrics is None else metrics.for_priority(priority),
            events.for_priority(priority),
        )

    def finished(self, outcome: Outcome, duration: float | None) -> None:
        # ``ToolObservers.finished`` without its loop, and without the log events when they
        # would do nothing (an ``ok`` call, no summary due): what every admitted call ends with.
        metrics = self._metrics
        if metrics is not None:
            try:
                metrics.finished(outcome, duration)
            except Exception as failure:
                observer_failed(metrics, "finished", failure)
        events = self._tool_events
        if events is None or outcome != "ok" or events.due < math.inf:
            try:
                self._events.finished(outcome, duration)
            except Exception as failure:
                observer_failed(self._events, "finished", failure)

    def admitted(self, queue_wait: float) -> None:
        metrics = self._metrics
        if metrics is not None:
            try:
                metrics.admitted(queue_wait)
            except Exception as failure:
                observer_failed(metrics, "admitted", failure)
