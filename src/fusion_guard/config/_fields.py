"""The value types of the configuration, each with the sentence that says what it accepts.

The global defaults (``GuardSettings``) and the per-tool overrides (``ToolPolicy``) share these
types, so a value means the same thing wherever it is written. ``off`` (or ``none``, or JSON
``null``) switches a limit off where switching off makes sense.
"""

from __future__ import annotations

from typing import Annotated, Literal

from annotated_types import Ge, Gt
from pydantic import AllowInfNan, BeforeValidator, StringConstraints

__all__ = [
    "ACCEPTED",
    "GLOBAL_FIELDS",
    "LIMIT_FIELDS",
    "Backend",
    "Burst",
    "FailurePolicy",
    "MaxActive",
    "MaxQueue",
    "Rate",
    "RatePer",
    "RateScope",
    "RedisPrefix",
    "Seconds",
    "SecondsOrOff",
]

_OFF_WORDS = frozenset({"off", "none", "null", "unlimited", "disabled"})


def _off_to_none(value: object) -> object:
    """``off`` (any case, surrounding blanks ignored) means no limit."""
    if isinstance(value, str) and value.strip().lower() in _OFF_WORDS:
        return None
    return value


def _auto_to_none(value: object) -> object:
    """``auto`` lets the limiter derive the value (burst from the rate, queue from the slots)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    return value


_Off = BeforeValidator(_off_to_none)

MaxActive = Annotated[Annotated[int, Ge(1)] | None, _Off]
MaxQueue = Annotated[Annotated[int, Ge(0)] | None, BeforeValidator(_auto_to_none)]
Seconds = Annotated[float, Gt(0), AllowInfNan(False)]
SecondsOrOff = Annotated[Seconds | None, _Off]
Rate = Annotated[Annotated[float, Gt(0), AllowInfNan(False)] | None, _Off]
RatePer = Seconds
Burst = Annotated[Annotated[int, Ge(1)] | None, BeforeValidator(_auto_to_none)]
RateScope = Literal["global", "tool", "client"]
Backend = Literal["memory", "redis"]
FailurePolicy = Literal["open", "closed"]
RedisPrefix = Annotated[str, StringConstraints(min_length=1, pattern=r"^[^{}]+$")]

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

_OFF = "or 'off'"
_FAILURE_POLICY = (
    "one of 'open' (when Redis fails, admit the call; counted and logged) or 'closed' (shed it"
    " with SERVER_BUSY)"
)
ACCEPTED: dict[str, str] = {
    "max_active": f"a whole number >= 1 (calls running at once per tool), {_OFF} for no limit",
    "max_queue": "a whole number >= 0 (calls waiting for a slot; 0 sheds at once when all"
    " slots are taken), or 'auto' (4 x MAX_ACTIVE)",
    "queue_timeout": f"a number of seconds > 0 (longest wait for a slot), {_OFF} to wait as long"
    " as the call itself is allowed to",
    "timeout": f"a number of seconds > 0 (the handler's deadline), {_OFF} for no deadline",
    "rate": f"a number > 0 (calls allowed per RATE_PER seconds), {_OFF} for no rate limit",
    "rate_per": "a number of seconds > 0 (the period RATE counts over)",
    "burst": "a whole number >= 1 (calls allowed back to back), or 'auto' (= RATE, at least 1)",
    "rate_scope": "one of 'global' (one budget shared by all tools), 'tool' (one budget per"
    " tool), 'client' (one budget per tool and client)",
    "lifo": "a boolean: true/false, 1/0, yes/no, on/off",
    "failure_policy": _FAILURE_POLICY,
    "metrics": "a boolean: true/false, 1/0, yes/no, on/off",
    "expose_exceptions": "a boolean: true/false, 1/0, yes/no, on/off",
    "backend": "one of 'memory' (state in this process) or 'redis' (state shared through Redis)",
    "redis_url": "a redis://, rediss:// or unix:// URL (required when BACKEND is 'redis')",
    "redis_failure_policy": _FAILURE_POLICY,
    "redis_timeout": "a number of seconds > 0 (the longest any Redis call may take)",
    "redis_lease": "a number of seconds > 0 (a fleet slot's lease: a crashed replica's slots"
    " come back within it)",
    "redis_prefix": "a non-empty string without braces (the Redis keys' namespace and cluster"
    " hash tag)",
    "tools": "a JSON object mapping tool names or globs to objects of per-tool limits, e.g."
    ' {"billing.*": {"max_active": 2}, "search": {"rate": 5}}',
}
"""What each field accepts, in the words of the error messages and the README table."""
