"""The interface between the rate limits (the GCRA strategy) and where their state lives.

A backend keeps one number per key, the GCRA theoretical arrival time (TAT), and decides
*several* limits at once, all or nothing: a call is recorded against every limit only when every
limit admits it, so a refusal by one limit never spends another's budget. The whole decision is
one atomic step: in memory no ``await`` separates the check from the record; on Redis it is one
Lua script, one round trip, on the server's clock.

GCRA, for one limit of ``rate`` calls per ``per`` seconds with bursts of ``burst``:

- ``emission_interval`` T = per / rate: the spacing of calls at the sustained rate;
- ``tolerance`` tau = (burst - 1) * T: how far ahead of the schedule a burst may run;
- a call at ``now`` passes when ``max(TAT, now) - now <= tau``; it then sets
  ``TAT = max(TAT, now) + T``. Otherwise it must wait ``max(TAT, now) - tau - now`` seconds.

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
    ``retry_after``: 0.0 when allowed; otherwise the exact seconds until every limit would admit
    it (the longest wait among the refusing limits; nothing was recorded).
    ``refused``: the index, in the request sequence, of the limit that waits longest; -1 when
    allowed.
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

    async def decide(self, requests: Sequence[GcraRequest]) -> GcraResult:
        """Decide one call against every request's limit, in one atomic step."""
        ...


@runtime_checkable
class SyncRateBackend(RateBackend, Protocol):
    """A backend that can also decide without awaiting (the in-memory one)."""

    def decide_now(self, requests: Sequence[GcraRequest]) -> GcraResult:
        """``decide``, synchronously."""
        ...


def key_digest(key: str) -> str:
    """A short stable digest of a key (16 hex digits), for logs: never log the key itself."""
    data = key.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=8, person=b"fusion_guard").hexdigest()
