"""The slots of a tool without a concurrency limit: always free, holding nothing.

A Guard's tool with no ``max_active`` still gives each call a slot (``Unbounded.slot``), so that
a tool with slots and one without end their calls the same way: the slot owns the call's
deadline and reports its end once (``Slot.leave``, inherited).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .._exceptions import HandlerTimeout
from .._observer import Outcome, ToolObserver, bind_priorities, observer_failed
from .._priority import Priority, check_priority
from ._deadline import Deadline, Timeouts
from ._slot import Slot

__all__ = ["Unbounded", "UnboundedSlot"]


class Unbounded:
    """The slots of a tool without a concurrency limit (the Guard's gate of such a tool): every
    call takes one at once and waits for nothing. Its slots hold nothing but what every call's
    slot owns, the call's deadline and the report of its end, so that a tool with slots and one
    without end their calls the same way. ``observer`` hears ``admitted`` and ``finished``;
    ``clock``: monotonic seconds, for the durations reported."""

    __slots__ = ("clock", "observer", "ranked", "timeouts")

    def __init__(
        self, tool: str, observer: ToolObserver, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.observer = observer
        self.ranked = bind_priorities(observer)  # each priority's, for its calls' admissions
        self.timeouts = Timeouts(tool)  # what a deadline's expiry raises, kept rendered
        self.clock = clock

    def slot(
        self,
        timeout: float | None = None,
        client: str | None = None,
        priority: Priority | str | None = None,
    ) -> UnboundedSlot:
        """A slot under ``timeout`` (None: no deadline); ``client`` and ``priority`` change
        nothing here (nothing waits) but the observer of ``priority``'s calls hears of it."""
        if priority is None:
            return UnboundedSlot(self, timeout, self.observer)
        return UnboundedSlot(self, timeout, self.ranked[check_priority("priority", priority).rank])


class UnboundedSlot(Slot):
    """One call's slot of ``Unbounded``: always free, taken without a coroutine. ``Slot``'s way
    of leaving (the deadline told apart, the end reported once) is inherited; nothing is given
    back."""

    __slots__ = ("_observer", "_slots")

    def __init__(self, slots: Unbounded, timeout: float | None, observer: ToolObserver) -> None:
        # No core to hold a place in: only what leaving needs (Slot.__init__ is not called).
        self._slots = slots
        self._observer = observer  # its priority's (the admission) and the tool's (the end)
        self._timeout = timeout
        self._client = None
        self._deadline: Deadline | None = None
        self._held = False
        self.queue_wait = 0.0

    async def __aenter__(self) -> UnboundedSlot:
        self.take_free()
        return self

    def take_free(self) -> bool:
        slots = self._slots
        observer = self._observer
        try:
            observer.admitted(0.0)
        except Exception as failure:  # observers never change an outcome
            observer_failed(observer, "admitted", failure)
        self._held = True
        self._ends = slots.observer
        self._start = slots.clock()
        if self._timeout is not None:
            self._deadline = Deadline(self._timeout)
        return True

    def _timed_out(self) -> HandlerTimeout:
        return self._slots.timeouts.refusal(self._timeout or 0.0)

    def caught(self, exc: BaseException) -> None:
        pass  # no limit to tell

    def _now(self) -> float:
        return self._slots.clock()

    __aexit__ = Slot.aleave  # its own end (``_end``): not the one ``Slot.__aexit__`` writes out

    def _end(self, outcome: Outcome) -> None:
        if self._held:
            self.report(outcome)
            self._held = False
