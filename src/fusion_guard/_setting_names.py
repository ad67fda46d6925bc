"""Names of the settings that several layers share, without the settings model.

The settings model (``config/``) needs pydantic-settings, about 100 ms to import; the Guard, the
policy table, the adapters and the Redis backend only need these names, so they import them from
here and the model loads on first use (``Guard()``, ``GuardSettings``, ``fusion-guard config``).
"""

from __future__ import annotations

from typing import Literal, TypeAlias

__all__ = ["GLOBAL_FIELDS", "LIMIT_FIELDS", "SECRET_FIELDS", "FailurePolicy"]

#: What happens to a call when a shared backend (Redis) fails: run it or refuse it.
FailurePolicy: TypeAlias = Literal["open", "closed"]

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
    "failure_policy",
)
"""The fields a per-tool override may set, in the order they are printed."""

GLOBAL_FIELDS: dict[str, str] = {"failure_policy": "redis_failure_policy"}
"""The global setting a per-tool key defaults to, where their names differ (the global one is
``REDIS_``-prefixed, as the other Redis settings are)."""

SECRET_FIELDS = frozenset({"redis_url"})
"""Fields whose values never appear in text as given (errors show them through ``redact_url``)."""
