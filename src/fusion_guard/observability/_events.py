"""Structured log events for refusals and failures, sampled so a storm costs little.

Events (through ``fusion_guard._log``: structlog when configured, else the stdlib logger
``fusion_guard``; never stdout), each with the fields ``tool``, ``reason``, ``active``, ``queued``,
``retry_after`` (``None`` where a figure does not apply or is unknown):

- ``call_shed`` (WARNING): reason ``queue_full`` / ``queue_timeout`` / ``backend_unavailable`` /
  ``fair_share`` / ``client_limit``, plus ``priority``, the refused call's (``interactive``, the
  default, for a call without one): always there, so that a log query for one priority's refusals
  needs no special case for the default.
- ``call_rate_limited`` (INFO): reason and ``scope`` = the limit's scope; a client key only as
  ``key_hash`` (salted).
- ``call_timeout`` (WARNING): reason ``handler_timeout``, plus ``duration``.
- ``call_internal_error`` (ERROR): reason ``handler_exception``, plus ``duration`` (the Guard
  logs the exception itself, with its reference id).
- ``call_events_suppressed`` (the level of the event it summarises): ``suppressed_event`` (the
  name of the events summarised), ``reason``, ``count`` (events of that window not logged one by
  one), ``window_s``, and for ``call_shed`` its ``priority``.

Sampling: per tool, event and reason (and priority, for ``call_shed``: a storm of background
refusals does not hide the first interactive one), the first event of each ``interval`` is
logged; the rest of that window is only counted, and one ``call_events_suppressed`` summary
carries the count when the window is over (reported at that tool's next event, or by
``flush()``). So under a storm of N refusals the log gets about two lines per interval (per
priority refused), and logged events plus summary counts add up to N.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import time
from collections.abc import Callable

from .._checks import check_number
from .._log import is_enabled, log_event
from .._observer import Outcome, ShedReason
from ._metric_definitions import DEFAULT_PRIORITY, LiveFigures

__all__ = ["LogEventObserver"]

_FAILURES: dict[str, tuple[str, int, str]] = {
    # outcome -> (event, level, reason)
    "timeout": ("call_timeout", logging.WARNING, "handler_timeout"),
    "internal_error": ("call_internal_error", logging.ERROR, "handler_exception"),
}


class _Window:
    """One (event, reason, priority) stream of one tool: when its window ends and what it
    swallowed (``priority``: None for the events that do not carry one)."""

    __slots__ = ("count", "ends", "level", "priority")

    def __init__(self, ends: float, level: int, priority: str | None) -> None:
        self.ends = ends
        self.level = level
        self.priority = priority
        self.count = 0


class LogEventObserver:
    """Logs shed / rate-limited / timeout / internal-error events (a ``GuardObserver``).

    ``interval`` (seconds, > 0) is the sampling window; ``clock`` a monotonic clock in seconds
    (inject a fake one in tests); ``key_salt`` salts the hash of client keys (a random one per
    observer by default, so hashes cannot be looked up in a dictionary of known keys).
    """

    __slots__ = ("_clock", "_interval", "_salt", "_tools")

    def __init__(
        self,
        *,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        key_salt: bytes | None = None,
    ) -> None:
        self._interval = check_number("interval", interval, 0, "seconds, the sampling window")
        self._clock = clock
        self._salt = os.urandom(16) if key_salt is None else bytes(key_salt)
        self._tools: dict[str, _ToolEvents] = {}

    def for_tool(self, tool: str, *, max_active: int | None) -> _ToolEvents:
        bound = self._tools.get(tool)
        if bound is None:
            bound = self._tools[tool] = _ToolEvents(tool, self._interval, self._clock, self._salt)
        return bound

    def flush(self) -> None:
        """Log the summaries of every window that swallowed events, ended or not (at shutdown,
        or in tests)."""
        for bound in self._tools.values():
            bound.flush(force=True)

    def __repr__(self) -> str:
        return f"LogEventObserver(interval={self._interval!r})"


class _ToolEvents:
    """One tool's sampled events (the ``ToolObserver`` the guard calls)."""

    __slots__ = ("_clock", "_interval", "_salt", "_windows", "due", "live", "tool")

    def __init__(self, tool: str, interval: float, clock: Callable[[], float], salt: bytes) -> None:
        self.tool = tool
        self.live: LiveFigures | None = None
        self._interval = interval
        self._clock = clock
        self._salt = salt
        self._windows: dict[tuple[str, str, str | None], _Window] = {}
        # Earliest end of a window holding a count; inf when no summary is owed (then an ``ok``
        # end does nothing here, and the default observers do not call ``finished`` for it).
        self.due = math.inf

    def watch(self, figures: LiveFigures) -> None:
        """Fill ``active`` / ``queued`` of events that do not carry them from ``figures``."""
        self.live = figures

    def admitted(self, queue_wait: float) -> None:
        """Admissions are not logged (the hot path does not log at all)."""

    def for_priority(self, priority: str) -> _PriorityEvents:
        """The events of the tool's calls of ``priority``: its refusals say it."""
        return _PriorityEvents(self, str(priority))

    def shed(
        self,
        reason: ShedReason,
        active: int,
        queued: int,
        retry_after: float,
        priority: str = DEFAULT_PRIORITY,
    ) -> None:
        """A call of ``priority`` was refused (``_PriorityEvents`` passes the priority)."""
        if self._sampled("call_shed", reason, logging.WARNING, priority):
            self._emit(
                logging.WARNING, "call_shed", reason, active, queued, retry_after,
                priority=priority,
            )  # fmt: skip

    def rate_limited(self, scope: str, retry_after: float, key: str | None = None) -> None:
        if self._sampled("call_rate_limited", scope, logging.INFO):
            extra = {} if key is None else {"key_hash": self.key_hash(key)}
            active, queued = self._figures()
            self._emit(
                logging.INFO, "call_rate_limited", scope, active, queued, retry_after,
                scope=scope, **extra,
            )  # fmt: skip

    def finished(self, outcome: Outcome, duration: float | None) -> None:
        failure = _FAILURES.get(outcome)
        if failure is not None:
            event, level, reason = failure
            if self._sampled(event, reason, level):
                active, queued = self._figures()
                self._emit(level, event, reason, active, queued, None, duration=duration)
        elif self.due < math.inf and self._clock() >= self.due:
            self.flush()

    def backend_error(self, backend: str, allowed: bool) -> None:
        """Reported by the backend itself, which knows the error; counted by the metrics."""

    def key_hash(self, key: str) -> str:
        """A salted, truncated hash of a client key: stable within this observer, not
        reversible to the key."""
        # surrogatepass: any str hashes (a lone surrogate is not UTF-8), distinct keys apart.
        data = key.encode("utf-8", "surrogatepass")
        digest = hashlib.blake2b(data, digest_size=8, key=self._salt[:64])
        return digest.hexdigest()

    def flush(self, *, force: bool = False) -> None:
        """Log the summary of every window that has ended (every window when ``force``)."""
        now = self._clock()
        due = math.inf
        for (event, reason, _), window in self._windows.items():
            if window.count and (force or now >= window.ends):
                self._summarise(event, reason, window)
            elif window.count:
                due = min(due, window.ends)
        self.due = due

    def _sampled(self, event: str, reason: str, level: int, priority: str | None = None) -> bool:
        """Whether this event opens a new window (log it) or falls in the current one (count
        it); also settles any summaries that are due. Under a storm most events fall in an open
        window: they are counted before anything else is asked (whether the level is on is
        asked only where a window opens; a window opens only while it is)."""
        now = self._clock()
        if now >= self.due:
            self.flush()
        key = (event, reason, priority)
        window = self._windows.get(key)
        if window is not None and now < window.ends:
            window.count += 1
            if window.ends < self.due:
                self.due = window.ends
            return False
        if not is_enabled(level):
            return False
        if window is None:
            self._windows[key] = _Window(now + self._interval, level, priority)
        else:
            window.ends = now + self._interval
        return True

    def _summarise(self, event: str, reason: str, window: _Window) -> None:
        extra: dict[str, object] = {} if window.priority is None else {"priority": window.priority}
        log_event(
            window.level,
            "call_events_suppressed",
            None,
            tool=self.tool,
            suppressed_event=event,
            reason=reason,
            count=window.count,
            window_s=self._interval,
            **extra,
        )
        window.count = 0

    def _figures(self) -> tuple[int | None, int | None]:
        live = self.live
        return (None, None) if live is None else (live.active, live.queued)

    def _emit(
        self,
        level: int,
        event: str,
        reason: str,
        active: int | None,
        queued: int | None,
        retry_after: float | None,
        **extra: object,
    ) -> None:
        fields: dict[str, object] = {
            "tool": self.tool,
            "reason": reason,
            "active": active,
            "queued": queued,
            "retry_after": retry_after,
        }
        fields.update(extra)
        log_event(level, event, None, **fields)


class _PriorityEvents:
    """The events of one tool's calls of one priority (``_ToolEvents.for_priority``): its
    refusals are logged as the tool's, with their priority, sampled apart; the rest is the
    tool's."""

    __slots__ = ("_tool", "priority")

    def __init__(self, tool: _ToolEvents, priority: str) -> None:
        self._tool = tool
        self.priority = priority

    def admitted(self, queue_wait: float) -> None:
        """Admissions are not logged."""

    def shed(self, reason: ShedReason, active: int, queued: int, retry_after: float) -> None:
        self._tool.shed(reason, active, queued, retry_after, self.priority)

    def rate_limited(self, scope: str, retry_after: float, key: str | None = None) -> None:
        self._tool.rate_limited(scope, retry_after, key)

    def finished(self, outcome: Outcome, duration: float | None) -> None:
        self._tool.finished(outcome, duration)

    def backend_error(self, backend: str, allowed: bool) -> None:
        """Reported by the backend itself (see ``_ToolEvents.backend_error``)."""
