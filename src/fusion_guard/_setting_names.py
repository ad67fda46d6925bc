"""Names of the settings that several layers share, without the settings model.

The settings model (``config/``) needs pydantic-settings, about 100 ms to import; the Guard, the
policy table, the adapters and the Redis backend only need these names, so they import them from
here and the model loads on first use (``Guard()``, ``GuardSettings``, ``fusion-guard config``).
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_LEASE",
    "DEFAULT_PREFIX",
    "DEFAULT_TIMEOUT",
    "GLOBAL_FIELDS",
    "LIMIT_FIELDS",
    "SECRET_FIELDS",
    "FailurePolicy",
]

FailurePolicy: TypeAlias = Literal["open", "closed"]
"""What a limit does when Redis fails: ``open`` admits the call (counted and logged),
``closed`` sheds it with SERVER_BUSY."""

# The Redis backend's defaults, which the settings model shows and the backend applies.
DEFAULT_TIMEOUT: Final = 0.05
"""Seconds one Redis call may take before the failure policy applies."""
DEFAULT_CONNECT_TIMEOUT: Final = 1.0
"""Seconds setting up a connection (and loading the scripts) may take."""
DEFAULT_PREFIX: Final = "fusion_guard"
"""The namespace of every key (on one Redis node also their hash tag)."""
DEFAULT_LEASE: Final = 10.0
"""Seconds a fleet slot's lease lives without a refresh (a crashed holder's slot comes back)."""

LIMIT_FIELDS = (
    "max_active",
    "max_queue",
    "queue_timeout",
    "timeout",
    "rate",
    "rate_per",
    "burst",
    "rate_scope",
    "lifo",
    "max_active_per_client",
    "fair_queueing",
    "failure_policy",
    "priority",
    "priority_share",
    "overload_errors",
)
"""The fields a per-tool override may set, in the order they are printed."""

GLOBAL_FIELDS: dict[str, str] = {"failure_policy": "redis_failure_policy"}
"""The global setting a per-tool key defaults to, where their names differ (the global one is
``REDIS_``-prefixed, as the other Redis settings are)."""

SECRET_FIELDS = frozenset({"redis_url"})
"""Fields whose values never appear in text as given (errors show them through ``redact_url``)."""
