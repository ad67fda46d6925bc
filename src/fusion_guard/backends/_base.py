"""The interface between the rate limits (the GCRA strategy) and where their state lives.

A backend keeps, per key, the GCRA theoretical arrival time (TAT) and a promise cursor, and decides
*several* limits at once, all or nothing: a call is recorded against every limit only when every
limit admits it, so a refusal by one limit never spends another's budget. The whole decision is
one atomic step: in memory no ``await`` separates the check from the record; on Redis it is one
Lua script, one round trip, on the server's clock.

GCRA, for one limit of ``rate`` calls per ``per`` seconds with bursts of ``burst``:

- ``emission_interval`` T = per / rate: the spacing of calls at the sustained rate;
- ``tolerance`` tau = (burst - 1) * T: how far ahead of the schedule a burst may run;
- a call at ``now`` passes when ``max(TAT, now) - now <= tau``; it then sets
  ``TAT = max(TAT, now) + T``. Otherwise the budget next opens at ``TAT - tau``.

Staggered promises. Telling every caller refused while the budget is exhausted that same opening
sends them all back together, into a second refusal for all but one. So the k-th refused caller
is told the k-th coming opening: the *promise cursor* P of a key is the next opening not yet
promised. A refusal promises ``opening = max(P, TAT - tau)`` (``retry_after = opening - now``) and
sets ``P = opening + T``; it never touches TAT, so it spends no budget. Callers who come back at
their promise (or later by up to tau) are admitted in turn: each admission moves TAT by T, onto
the next promise. An admitted call leaves P alone. Promises lapse by themselves: once time has
moved past P, or the budget's own opening has moved past it (fresh callers took the openings
nobody came back for), the max() falls back to the budget's opening. Promises are advice, not
reservations: a caller who finds the budget open is admitted, whoever the opening was promised to,
except a known caller who comes back before its own promise (below).

Who takes promises. A *known* caller (the decision's ``caller``: a client key) holds at most one
promise per decision: refused again before its time, it is told the same opening, and no
cursor moves; coming back early it is refused with its promise even when the budget has room
(the openings before it are promised to others), so a client retrying in a loop takes its turn
and no more. A known caller's promise also moves the key's *frontier* F (one interval past the
last opening promised to a known caller). Anonymous refusals take the next opening each, but
never one past ``max(F, TAT - tau) + tau + T``: at most ``burst`` openings beyond the later of the
budget's own next opening and the known callers' (the *anonymous bound*). A crowd of known
callers is staggered however large (one opening each); anonymous callers, whom nothing tells
from one caller retrying, share at most ``burst`` openings past the known ones, so nobody is
told more than ``(burst + 1) * T`` past the known callers' promises however often they poll.

Several limits: the advice is the latest opening among the refusing limits, and each refusing
limit's cursor moves one of its intervals past that time (the caller takes one opening of every
limit when it comes back then); limits that admitted are left alone.

Keys may hold caller identities (user or tenant ids): never log them; log :func:`key_digest`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

__all__ = [
    "ALLOWED",
    "GcraRequest",
    "GcraResult",
    "RateBackend",
    "SyncRateBackend",
    "key_digest",
]


GcraRequest: TypeAlias = tuple[str, float, float]
"""One limit's part of a decision: ``(key, emission_interval, tolerance)``.

``key``: the backend key (the limit's namespace plus the caller's key; keys are distinct within
one decision). ``emission_interval`` and ``tolerance``: seconds, as in the module docstring. A
plain tuple, because one is built per limit per call and a tuple literal is the cheapest object.
"""


@dataclass(frozen=True, slots=True)
class GcraResult:
    """The outcome of one decision over several limits.

    ``allowed``: every limit admitted the call (and it was recorded against each).
    ``retry_after``: 0.0 when allowed; otherwise the seconds until the opening promised to this
    caller: the latest among the refusing limits, each limit's next opening not yet promised to
    an earlier refused caller (no budget was spent).
    ``refused``: the index, in the request sequence, of the limit whose opening is the latest;
    -1 when allowed.
    """

    allowed: bool
    retry_after: float
    refused: int


ALLOWED = GcraResult(True, 0.0, -1)
"""The one result every admitted decision returns (nothing to allocate on the common path)."""


@runtime_checkable
class RateBackend(Protocol):
    """Where GCRA state lives. Implementations: ``MemoryBackend`` (this process) and the Redis
    backend (a fleet). ``decide`` must be atomic and all-or-nothing (see the module docstring);
    a shared backend that fails raises :class:`~fusion_guard.BackendError`."""

    async def decide(
        self, requests: Sequence[GcraRequest], caller: str | None = None
    ) -> GcraResult:
        """Decide one call against every request's limit, in one atomic step. ``caller``: who
        is asking, when known (a client key): one outstanding promise per caller."""
        ...


@runtime_checkable
class SyncRateBackend(RateBackend, Protocol):
    """A backend that can also decide without awaiting (the in-memory one)."""

    def decide_now(self, requests: Sequence[GcraRequest], caller: str | None = None) -> GcraResult:
        """``decide``, synchronously."""
        ...


def key_digest(key: str) -> str:
    """A short stable digest of a key (16 hex digits), for logs: never log the key itself."""
    data = key.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=8, person=b"fusion_guard").hexdigest()
