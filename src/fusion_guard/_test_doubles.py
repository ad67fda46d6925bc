"""Test doubles users need to test code built on fusion_guard (re-exported by
``fusion_guard.testing``): an observer that records what the guard reports and a rate backend
that fails like an unreachable Redis."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ._exceptions import BackendError
from ._observer import Outcome, ShedReason
from .backends._base import GcraRequest, GcraResult

__all__ = ["Event", "FailingBackend", "RecordingObserver", "ToolRecorder"]

Event = tuple[object, ...]
"""One report: ``("admitted", queue_wait)``, ``("shed", reason, active, queued, retry_after)``,
``("rate_limited", scope, retry_after)``, ``("finished", outcome, duration)`` or
``("backend_error", backend, allowed)`` (a rate-limit key is never recorded)."""


class ToolRecorder:
    """A ``ToolObserver`` that appends every report to ``events`` (its own list by default):
    ``ConcurrencyGuard(observer=ToolRecorder())``."""

    def __init__(self, events: list[Event] | None = None) -> None:
        self.events: list[Event] = [] if events is None else events

    def admitted(self, queue_wait: float) -> None:
        self.events.append(("admitted", queue_wait))

    def shed(self, reason: ShedReason, active: int, queued: int, retry_after: float) -> None:
        self.events.append(("shed", reason, active, queued, retry_after))

    def rate_limited(self, scope: str, retry_after: float, key: str | None = None) -> None:
        self.events.append(("rate_limited", scope, retry_after))

    def finished(self, outcome: Outcome, duration: float | None) -> None:
        self.events.append(("finished", outcome, duration))

    def backend_error(self, backend: str, allowed: bool) -> None:
        self.events.append(("backend_error", backend, allowed))


class RecordingObserver:
    """A ``GuardObserver``: ``Guard(observer=RecordingObserver())``; ``events[tool]`` lists
    what was reported about the tool's calls, in order, and ``bound`` each ``for_tool``."""

    def __init__(self) -> None:
        self.events: defaultdict[str, list[Event]] = defaultdict(list)
        self.bound: list[tuple[str, int | None]] = []

    def for_tool(self, tool: str, *, max_active: int | None) -> ToolRecorder:
        self.bound.append((tool, max_active))
        return ToolRecorder(self.events[tool])

    def ends(self, tool: str) -> list[str]:
        """How each call of ``tool`` ended: its outcome, or ``shed`` / ``rate_limited``."""
        return [
            str(event[1]) if event[0] == "finished" else str(event[0])
            for event in self.events[tool]
            if event[0] in ("finished", "shed", "rate_limited")
        ]


class FailingBackend:
    """A rate backend that fails every decision with :class:`~fusion_guard.BackendError`, as an
    unreachable Redis does: ``Guard(rate=5, rate_backend=FailingBackend())`` exercises the
    failure policy."""

    def __init__(self, message: str = "redis unreachable") -> None:
        self.message = message
        self.calls = 0

    async def decide(self, requests: Sequence[GcraRequest]) -> GcraResult:
        self.calls += 1
        raise BackendError(self.message)
