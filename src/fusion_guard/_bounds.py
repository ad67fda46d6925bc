"""The ranges of the numbers the settings accept, where the memory backend would take anything
but Redis would not: a value outside them is refused at start-up rather than break every call.

The Redis scripts count in whole microseconds (GCRA) and milliseconds (leases), in Lua numbers:
doubles, exact below 2^53. A budget's times are ``now`` (about 1.8e15 us since 1970) plus at most
one burst's span, and a refusal's reply is its wait times 64 (``gcra.lua``), so spans stay
within a year (3.2e13 us, 2e15 after the factor: exact). An emission interval rounds to a whole
microsecond, so it is kept at 10 us or more (within 5 % of the rate asked for); below half a
microsecond it would round to 0 and the limit would never refuse.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "LEASE_REFRESH_PERIOD",
    "LEASE_REFRESHES",
    "MAX_CALLS_PER_SECOND",
    "MAX_LEASE",
    "MAX_SPAN",
    "lease_floor",
    "rate_problem",
]

MAX_SPAN: Final = 31_536_000.0
"""Seconds (365 days): the longest ``RATE_PER``, emission interval (``RATE_PER / RATE``) and
burst span (``(BURST - 1) x RATE_PER / RATE``)."""
MAX_CALLS_PER_SECOND: Final = 100_000
"""The fastest rate (``RATE / RATE_PER``): an emission interval of 10 us."""

LEASE_REFRESH_PERIOD: Final = 0.25
"""Seconds between two refreshes of a process's fleet leases, at the most."""
LEASE_REFRESHES: Final = 3
"""Refreshes a lease outlives: two may fail (a slow Redis) before a running call loses its slot."""
MAX_LEASE: Final = 86_400.0
"""Seconds (a day): the longest fleet lease (a crashed replica's slots come back within it)."""


def lease_floor(timeout: float) -> float:
    """The shortest lease: ``LEASE_REFRESHES`` refresh periods plus one Redis call's
    ``timeout``, so a lease outlives two failed refreshes and the third's round trip. Shorter,
    leases lapse under running calls (more calls run than the fleet's limit), and the refresher
    runs a round trip every third of the lease."""
    return LEASE_REFRESHES * LEASE_REFRESH_PERIOD + timeout


def rate_problem(rate: float, per: float, burst: int | None) -> str | None:
    """What is wrong with a rate limit of ``rate`` calls per ``per`` seconds and bursts of
    ``burst`` (None: the automatic burst, ``RATE`` calls), or None when Redis holds it."""
    interval = per / rate
    if rate / per > MAX_CALLS_PER_SECOND:
        return (
            f"RATE / RATE_PER is {rate / per:g} calls a second; at most {MAX_CALLS_PER_SECOND}"
            " are counted (Redis counts whole microseconds)"
        )
    if interval > MAX_SPAN:
        return (
            f"RATE_PER / RATE is one call every {interval:.10g} seconds; at least one call every"
            f" {MAX_SPAN:.0f} seconds (a year) is accepted"
        )
    span = (burst - 1) * per / rate if burst is not None else 0.0
    if span > MAX_SPAN:
        return (
            f"(BURST - 1) x RATE_PER / RATE spans {span:.10g} seconds; at most"
            f" {MAX_SPAN:.0f} (a year) is accepted"
        )
    return None
