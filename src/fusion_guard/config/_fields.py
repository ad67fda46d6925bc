"""The value types of the configuration, each with the sentence that says what it accepts.

The global defaults (``GuardSettings``) and the per-tool overrides (``ToolPolicy``) share these
types, so a value means the same thing wherever it is written. ``off`` (or ``none``, or JSON
``null``) switches a limit off where switching off makes sense.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, final
from urllib.parse import urlsplit

from annotated_types import Ge, Gt, Le
from pydantic import (
    AfterValidator,
    AllowInfNan,
    BeforeValidator,
    GetCoreSchemaHandler,
    PlainSerializer,
    PlainValidator,
    StringConstraints,
)
from pydantic_core import CoreSchema, core_schema

from .._bounds import (
    LEASE_REFRESH_PERIOD,
    LEASE_REFRESHES,
    MAX_CALLS_PER_SECOND,
    MAX_LEASE,
    MAX_SPAN,
)
from .._priority import Priority
from .._redis_urls import CLUSTER_SCHEME, SENTINEL_SCHEME, parse_multi_node_url
from .._secrets import redact_url
from .._setting_names import GLOBAL_FIELDS, LIMIT_FIELDS, SECRET_FIELDS, FailurePolicy
from ._overload_errors import check_overload_errors, dotted_name

__all__ = [
    "ACCEPTED",
    "SECRET_FIELDS",
    "GLOBAL_FIELDS",
    "LIMIT_FIELDS",
    "Backend",
    "Burst",
    "FailurePolicy",
    "AutoBound",
    "Lease",
    "RedisSeconds",
    "MaxActive",
    "MaxQueue",
    "OverloadErrors",
    "PerClient",
    "PriorityLevel",
    "PriorityShare",
    "Rate",
    "RatePer",
    "RateScope",
    "RedisPrefix",
    "RedisUrl",
    "SecretUrl",
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


def _max_active(value: object) -> int | Literal["auto"] | None:
    """A whole number >= 1, ``auto`` (an adaptive limit) or ``off`` (any case, blanks ignored);
    one check, so that a bad value gets one sentence rather than one per form it could take."""
    if isinstance(value, str):
        word = value.strip().lower()
        if word == "auto":
            return "auto"
        if word in _OFF_WORDS:
            return None
        if word.isascii() and word.isdigit():  # int() would also read '٣' and fail on '²'
            value = int(word)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("not a whole number, 'auto' or 'off'")
    if value < 1:
        raise ValueError("a number of slots must be at least 1")
    return value


_Off = BeforeValidator(_off_to_none)

MaxActive = Annotated[int | Literal["auto"] | None, PlainValidator(_max_active)]
AutoBound = Annotated[int, Ge(1)]
MaxQueue = Annotated[Annotated[int, Ge(0)] | None, BeforeValidator(_auto_to_none)]
PerClient = Annotated[Annotated[int, Ge(1)] | None, _Off]
Seconds = Annotated[float, Gt(0), AllowInfNan(False)]
SecondsOrOff = Annotated[Seconds | None, _Off]
Rate = Annotated[Annotated[float, Gt(0), AllowInfNan(False)] | None, _Off]
RatePer = Annotated[Seconds, Le(MAX_SPAN)]
Lease = Annotated[Seconds, Le(MAX_LEASE)]
# Below a millisecond no Redis call (a network round trip) could answer in time: every call
# would take the failure policy.
RedisSeconds = Annotated[float, Ge(0.001), AllowInfNan(False)]
Burst = Annotated[Annotated[int, Ge(1)] | None, BeforeValidator(_auto_to_none)]
RateScope = Literal["global", "tool", "client"]


def _lower(value: object) -> object:
    """Priority names in any case, surrounding blanks ignored."""
    return value.strip().lower() if isinstance(value, str) else value


PriorityLevel = Annotated[Priority, BeforeValidator(_lower)]
PriorityShare = Annotated[float, Gt(0), Le(1), AllowInfNan(False)]
Backend = Literal["memory", "redis"]


def _names(errors: tuple[type[BaseException], ...]) -> list[str]:
    return [dotted_name(error) for error in errors]


# Classes in code, dotted names from the environment (imported here, at start-up); JSON shows
# the names, which the environment accepts back.
OverloadErrors = Annotated[
    tuple[type[BaseException], ...],
    PlainValidator(check_overload_errors),
    PlainSerializer(_names, when_used="json"),
]
RedisPrefix = Annotated[str, StringConstraints(min_length=1, pattern=r"^[^{}]+$")]


@final
class SecretUrl:
    """A URL that may hold a password: ``str()`` and ``repr()`` show it with the password
    masked (host, port and database readable), so no error, repr, log or report can leak it;
    ``get_secret_value()`` gives the URL to connect with.

    Fields of this type accept a plain string (or a ``SecretUrl``).
    """

    __slots__ = ("_url",)

    def __init__(self, url: str) -> None:
        self._url = url

    def get_secret_value(self) -> str:
        return self._url

    def __str__(self) -> str:
        return redact_url(self._url)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({redact_url(self._url)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretUrl) and other._url == self._url

    def __hash__(self) -> int:
        return hash(self._url)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        # One string schema for both inputs, so a bad value gives one error, not one per branch.
        return core_schema.no_info_before_validator_function(
            _unwrap,
            core_schema.no_info_after_validator_function(cls, core_schema.str_schema()),
            serialization=core_schema.plain_serializer_function_ser_schema(str, when_used="json"),
        )


def _unwrap(value: object) -> object:
    return value.get_secret_value() if isinstance(value, SecretUrl) else value


_REDIS_SCHEMES = ("redis://", "rediss://", "unix://", CLUSTER_SCHEME, SENTINEL_SCHEME)
_MAX_PORT = 65535


def _redis_url(url: SecretUrl) -> SecretUrl:
    """Refuse at construction a URL the Redis client would fail on at every call."""
    text = url.get_secret_value()
    if not text.startswith(_REDIS_SCHEMES):
        raise ValueError(
            "the URL must start with redis://, rediss://, unix://, redis+cluster:// or"
            " redis+sentinel://"
        )
    if parse_multi_node_url(text) is not None:  # raises ValueError, never quoting the URL
        return url
    try:
        port = urlsplit(text).port
    except ValueError:  # not a number, out of range, or a broken [IPv6] host
        port = 0
    if port is not None and not 0 < port <= _MAX_PORT:
        raise ValueError(
            "the host or port cannot be read (the port is a whole number from 1 to 65535;"
            " percent-encode ':', '/', '?', '#' and '@' in a password)"
        )
    return url


RedisUrl = Annotated[SecretUrl, AfterValidator(_redis_url)]

_OFF = "or 'off'"
_FAILURE_POLICY = (
    "one of 'open' (when Redis fails, admit the call; counted and logged) or 'closed' (shed it"
    " with SERVER_BUSY)"
)
ACCEPTED: dict[str, str] = {
    "max_active": f"a whole number >= 1 (calls running at once per tool), 'auto' (found from"
    f" the tool's latency, within AUTO_MIN_ACTIVE..AUTO_MAX_ACTIVE), {_OFF} for no limit",
    "auto_min_active": "a whole number >= 1 (the least an automatic max_active goes to)",
    "auto_max_active": "a whole number >= 1 (the most an automatic max_active goes to; with"
    " BACKEND=redis, the fleet's cap)",
    "auto_initial_active": "a whole number >= 1 (where an automatic max_active starts)",
    "max_queue": "a whole number >= 0 (calls waiting for a slot; 0 sheds at once when all"
    " slots are taken), or 'auto' (10 x MAX_ACTIVE)",
    "queue_timeout": f"a number of seconds > 0 (longest wait for a slot), {_OFF} to wait as long"
    " as the call itself is allowed to",
    "timeout": f"a number of seconds > 0 (the handler's deadline), {_OFF} for no deadline",
    "rate": f"a number > 0 (calls allowed per RATE_PER seconds; RATE / RATE_PER from one call a"
    f" year to {MAX_CALLS_PER_SECOND} a second), {_OFF} for no rate limit",
    "rate_per": f"a number of seconds > 0, at most {MAX_SPAN:.0f} (a year; the period RATE counts"
    " over)",
    "burst": "a whole number >= 1 (calls allowed back to back; (BURST - 1) x RATE_PER / RATE at"
    " most a year), or 'auto' (= RATE, at least 1)",
    "rate_scope": "one of 'global' (one budget shared by all tools), 'tool' (one budget per"
    " tool), 'client' (one budget per tool and client)",
    "lifo": "a boolean: true/false, 1/0, yes/no, on/off",
    "max_active_per_client": "a whole number >= 1, at most MAX_ACTIVE (calls one client key may"
    f" have running or waiting at once per tool), {_OFF} for no cap",
    "fair_queueing": "a boolean: true/false, 1/0, yes/no, on/off (waiting calls served in turn"
    " across client keys)",
    "failure_policy": _FAILURE_POLICY,
    "priority": "one of 'critical', 'interactive', 'background' or 'sheddable' (the priority of"
    " the tool's calls; highest first, 'interactive' by default)",
    "priority_share": "a number > 0 and <= 1 (the share of the tool's slots calls below the"
    " highest priority waiting may hold; 1 for strict priority alone)",
    "overload_errors": "Exception subclasses meaning the backend is saturated, as classes in"
    " code; in the environment their dotted names (package.module.ClassName, imported at"
    " start-up), comma-separated in OVERLOAD_ERRORS, a JSON list in TOOLS; or 'off' for none",
    "metrics": "a boolean: true/false, 1/0, yes/no, on/off",
    "expose_exceptions": "a boolean: true/false, 1/0, yes/no, on/off",
    "strict_tools": "a boolean: true/false, 1/0, yes/no, on/off (a TOOLS pattern that matches no"
    " tool of the server stops it at start-up instead of a warning)",
    "backend": "one of 'memory' (state in this process) or 'redis' (state shared through Redis)",
    "redis_url": (
        "a redis://, rediss://, unix://, redis+cluster://host:port[,host:port...] or"
        " redis+sentinel://host:port[,host:port...]/service_name URL (required when BACKEND is"
        " 'redis')"
    ),
    "redis_failure_policy": _FAILURE_POLICY,
    "redis_timeout": "a number of seconds >= 0.001 (the longest any Redis call may take)",
    "redis_connect_timeout": (
        "a number of seconds >= 0.001 (the budget for setting up the first connections and"
        " loading the scripts at start-up)"
    ),
    "redis_lease": f"a number of seconds from {LEASE_REFRESHES * LEASE_REFRESH_PERIOD:g} +"
    f" REDIS_TIMEOUT ({LEASE_REFRESHES} refreshes of {LEASE_REFRESH_PERIOD:g} s and one Redis"
    f" call) to {MAX_LEASE:.0f} (a day): a fleet slot's lease, a crashed replica's slots come back"
    " within it",
    "redis_prefix": "a non-empty string without braces (the Redis keys' namespace)",
    "tools": "a JSON object mapping tool names or globs to objects of per-tool limits, e.g."
    ' {"billing.*": {"max_active": 2}, "search": {"rate": 5}}',
}
"""What each field accepts, in the words of the error messages and the README table."""
