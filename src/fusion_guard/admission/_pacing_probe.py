"""How a pace rises while the upstream refuses nothing, and backs off when it does (``_pacing.py``).

A pace that held calls back while the upstream refused none rises a step: the upstream's rate is
found from below, as the refusals find it from above. Any raise is a probe: if the upstream
refuses in the next measurement, the pace goes back to where it rose from, which it served
without refusing, and the next probe waits 1, 2, 4 ... measurements (up to ``2 **
PROBE_BACKOFF``; a probe served resets the wait). An upstream whose rate the pace just meets
would otherwise be probed every other measurement: a bucket of one token serves half of a pace a
little above its rate (each call spaced less than a token apart finds none, and the next finds
one), so a pace there must settle just under it.
"""

from __future__ import annotations

import math

__all__ = ["PROBE_BACKOFF", "PaceProbe"]

#: Probes refused in a row space the next one out 2 ** n measurements, n up to this.
PROBE_BACKOFF = 4


class PaceProbe:
    """The probes of one pacer (see the module), raising it by ``step`` (a factor > 1)."""

    __slots__ = ("_failed", "_from", "_step", "_wait")

    def __init__(self, step: float) -> None:
        self._step = step
        self._from = math.nan  # the pace the last raise rose from (NaN: it raised none)
        self._wait = 0  # measurements before the next probe
        self._failed = 0  # probes refused in a row

    def clean(self, previous: float, measured: float, held_back: bool) -> float:
        """The pace after a measurement the upstream refused nothing in: ``measured`` (the
        served calls' rate and headroom) or ``previous``, the higher, and a step above
        ``previous`` when the guard ``held_back`` calls for it, unless a probe refused lately
        asks to wait (then ``previous``)."""
        if self._from == self._from:  # a probe the upstream served
            self._failed = 0
        if self._wait > 0:
            self._wait -= 1
            rate = previous
        else:
            rate = max(measured, previous)
            if held_back:
                rate = max(rate, self._step * previous)
        self._from = previous if rate > previous else math.nan
        return rate

    def refused(self) -> float | None:
        """After a measurement the upstream refused calls in: the pace the last raise rose
        from, the next probe waiting longer; None when the last measurement raised none."""
        start = self._from
        if start != start:
            return None
        self._from = math.nan
        self._wait = 2**self._failed
        self._failed = min(self._failed + 1, PROBE_BACKOFF)
        return start
