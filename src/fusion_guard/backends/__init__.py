"""Where limiter state lives: in memory (the default) or in Redis (shared by a fleet).

For backend implementers: the :class:`RateBackend` protocol, its request and result types, and
:func:`key_digest` (log keys only through it).
"""

from ._base import GcraRequest, GcraResult, RateBackend, SyncRateBackend, key_digest
from ._memory import MemoryBackend

__all__ = [
    "GcraRequest",
    "GcraResult",
    "MemoryBackend",
    "RateBackend",
    "SyncRateBackend",
    "key_digest",
]
