"""A recording observer: every decision the guard reports, per tool, in order."""

from __future__ import annotations

from collections import defaultdict

from fusion_guard._observer import Outcome, ShedReason

Event = tuple[object, ...]


class RecordingToolObserver:
    def __init__(self, events: list[Event]) -> None:
        self.events = events

    def admitted(self, queue_wait: float) -> None:
        self.events.append(("admitted", queue_wait))

    def shed(self, reason: ShedReason, active: int, queued: int, retry_after: float) -> None:
        self.events.append(("shed", reason))

    def rate_limited(self, scope: str, retry_after: float, key: str | None = None) -> None:
        self.events.append(("rate_limited", scope))

    def finished(self, outcome: Outcome, duration: float | None) -> None:
        self.events.append(("finished", outcome, duration))

    def backend_error(self, backend: str, allowed: bool) -> None:
        self.events.append(("backend_error", backend, allowed))


class RecordingObserver:
    """A GuardObserver; ``events[tool]`` lists what was reported about the tool's calls."""

    def __init__(self) -> None:
        self.events: defaultdict[str, list[Event]] = defaultdict(list)
        self.bound: list[tuple[str, int | None]] = []

    def for_tool(self, tool: str, *, max_active: int | None) -> RecordingToolObserver:
        self.bound.append((tool, max_active))
        return RecordingToolObserver(self.events[tool])

    def ends(self, tool: str) -> list[str]:
        """How each call ended: the outcome, or ``shed`` / ``rate_limited``."""
        return [
            str(event[1]) if event[0] == "finished" else str(event[0])
            for event in self.events[tool]
            if event[0] in ("finished", "shed", "rate_limited")
        ]
