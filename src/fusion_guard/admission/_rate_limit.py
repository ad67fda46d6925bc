"""What a rate limit limits: ``rate`` calls per ``per`` seconds, bursts of ``burst``, per key of
a scope (a key function turning a :class:`CallContext` into the caller's key). A description
only, with no state: ``_rate.py``'s ``RateLimiter`` enforces it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TypeAlias

from .._checks import check_int, check_number
from .._exceptions import ConfigurationError
from ..wire._render import format_detail_value
from ..wire._shedding import describe_rate
from ._context import CallContext

__all__ = ["SCOPES", "KeyFunction", "RateLimit", "check_limits"]

KeyFunction: TypeAlias = Callable[[CallContext], str]
"""Turns a call's context into the caller's key within one limit."""

_NAME = re.compile(r"[A-Za-z0-9_.\-/]{1,200}")
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def _global_key(ctx: CallContext) -> str:
    return ""


def _tool_key(ctx: CallContext) -> str:
    return ctx.tool


def _client_key(ctx: CallContext) -> str:
    # Calls with no known client share one anonymous budget: the safe side of "unknown".
    return "" if ctx.client is None else ctx.client


SCOPES: dict[str, KeyFunction] = {"global": _global_key, "tool": _tool_key, "client": _client_key}
"""The built-in scopes and their default key functions: one budget for the whole server, one
per tool, one per client (across tools)."""


def _check_scope(scope: object, key: object) -> tuple[str, KeyFunction]:
    if not isinstance(scope, str) or not scope:
        raise ConfigurationError(
            f"scope={scope!r} is invalid: expected 'global', 'tool', 'client' or a custom name"
        )
    if key is not None:
        if not callable(key):
            raise ConfigurationError(
                f"key={key!r} is invalid: expected a function CallContext -> str, or None"
            )
        return scope, key
    if scope not in SCOPES:
        raise ConfigurationError(
            f"scope={scope!r} needs a key function: the built-in scopes are 'global', 'tool'"
            " and 'client'; a custom scope gives key=lambda ctx: ..."
        )
    return scope, SCOPES[scope]


def _check_name(name: object, default: str) -> str:
    if name is None:
        return default
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise ConfigurationError(
            f"name={name!r} is invalid: expected 1 to 200 letters, digits or '_.-/' (it"
            " namespaces the limit's keys in the backend)"
        )
    return name


def _default_name(scope: str, rate: float, per: float, burst: int) -> str:
    # Stable across processes (replicas sharing a Redis backend must agree on it).
    figures = f"{format_detail_value(rate)}/{format_detail_value(per)}/{burst}"  # exact
    return f"{_NAME_UNSAFE.sub('_', scope)}/{figures}"


class RateLimit:
    """What is limited: ``rate`` calls per ``per`` seconds, bursts of up to ``burst`` calls, per
    key of ``scope``. A description only (immutable); a :class:`RateLimiter` enforces it.

    ``scope``: ``"global"`` (one budget), ``"tool"`` (one per tool), ``"client"`` (one per
    client across tools; calls with no known client share one), or a custom name with ``key``, a
    function ``CallContext -> str`` (``key`` may also replace a built-in scope's default, for
    example ``scope="client", key=lambda ctx: f"{ctx.client}/{ctx.tool}"`` for a budget per
    client per tool). ``name`` namespaces the limit's keys in a backend shared with other limits;
    the default is made from the scope and the figures.
    """

    __slots__ = ("_interval", "_key", "_namespace", "_tolerance", "burst", "name", "per", "rate",
                 "scope")  # fmt: skip

    def __init__(
        self,
        rate: float,
        per: float = 1.0,
        burst: int = 1,
        *,
        scope: str = "global",
        key: KeyFunction | None = None,
        name: str | None = None,
    ) -> None:
        self.rate = check_number("rate", rate, 0, "calls per `per` seconds")
        self.per = check_number("per", per, 0, "the period in seconds")
        self.burst = check_int("burst", burst, 1, "calls admitted at once")
        self.scope, self._key = _check_scope(scope, key)
        default = _default_name(self.scope, self.rate, self.per, self.burst)
        self.name = _check_name(name, default)
        self._namespace = self.name + ":"
        self._interval = self.per / self.rate
        self._tolerance = (self.burst - 1) * self._interval

    def __setattr__(self, name: str, value: object) -> None:
        # Each attribute is set once, in __init__: a later change would leave the derived
        # interval, tolerance and namespace stale.
        if hasattr(self, name):
            raise AttributeError(f"RateLimit.{name} is read-only: make a new RateLimit")
        object.__setattr__(self, name, value)

    @property
    def emission_interval(self) -> float:
        """Seconds between calls at the sustained rate (``per / rate``)."""
        return self._interval

    @property
    def tolerance(self) -> float:
        """How far (seconds) a burst may run ahead of the sustained schedule."""
        return self._tolerance

    @property
    def description(self) -> str:
        """``10 calls per 1 second``: how envelopes name this limit."""
        return describe_rate(self.rate, self.per)

    @property
    def key_function(self) -> KeyFunction:
        """The caller's key within this limit, from the call's context (private: never echo
        what it returns, log ``key_digest``)."""
        return self._key

    @property
    def namespace(self) -> str:
        """The prefix of this limit's keys in a backend it shares with other limits."""
        return self._namespace

    def __repr__(self) -> str:
        return (
            f"RateLimit(rate={self.rate:g}, per={self.per:g}, burst={self.burst},"
            f" scope={self.scope!r}, name={self.name!r})"
        )


def check_limits(limits: Iterable[RateLimit]) -> tuple[RateLimit, ...]:
    result = tuple(limits)
    names: set[str] = set()
    for limit in result:
        if not isinstance(limit, RateLimit):
            raise ConfigurationError(f"limits contains {limit!r}: expected RateLimit instances")
        if limit.name in names:
            raise ConfigurationError(
                f"two limits are named {limit.name!r}: their keys would collide in the"
                " backend; give each a distinct name="
            )
        names.add(limit.name)
    return result
