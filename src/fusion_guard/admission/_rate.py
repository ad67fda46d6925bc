"""Rate limits: ``rate`` calls per ``per`` seconds with bursts of ``burst``, decided by GCRA.

Three separate pieces (as in the ``limits`` library): *what* is limited (a scope and a key
function turning a :class:`CallContext` into the caller's key), *how* it is decided (GCRA: one
theoretical arrival time per key, see ``backends/_base.py``), and *where* the state lives (a
backend: in memory by default, Redis for a fleet).

A refusal's ``retry_after`` is a promise: callers refused while a budget is exhausted are told
its successive openings, one emission interval apart, so a crowd that follows the advice comes
back spread out at the limit's pace instead of all at once (``backends/_base.py`` has the rule).

- :class:`RateLimiter` is one limit. ``try_acquire(key)`` decides synchronously (in-memory
  backend); ``await acquire(key)`` works with any backend.
- :class:`RateLimits` composes several limits (say 100/s for the server and 10/s per client): a
  call passes only when all admit it, decided in one atomic backend step, and a refusal spends no
  limit's budget. ``check(ctx)`` / ``await acheck(ctx)`` answer ``None`` (admitted) or the
  :class:`~fusion_guard.RateLimited` to raise, whose envelope never contains the caller's key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from .._clock import Clock
from .._exceptions import ConfigurationError, RateLimited
from ..backends._base import GcraRequest, GcraResult, RateBackend, SyncRateBackend
from ..backends._memory import MemoryBackend
from ..wire._render import format_detail_value
from ..wire._shedding import RateLimitedTemplate, describe_rate
from ._context import CallContext

__all__ = ["SCOPES", "KeyFunction", "RateDecision", "RateLimiter", "RateLimits"]

KeyFunction: TypeAlias = Callable[[CallContext], str]
"""Turns a call's context into the caller's key within one limit."""

_NAME = re.compile(r"[A-Za-z0-9_.\-/]{1,200}")
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")
# Tool names come from the server's own registry, but do not let a flood of unknown names grow
# the envelope cache without bound: past this many tools, refusals are rendered uncached.
_MAX_CACHED_TOOLS = 4096


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


@dataclass(frozen=True, slots=True)
class RateDecision:
    """``allowed``; ``retry_after``: 0.0 when allowed, else the seconds until the opening
    promised to this caller (successive refusals are promised successive openings)."""

    allowed: bool
    retry_after: float


_ADMITTED = RateDecision(True, 0.0)


def _check_number(parameter: str, value: object, meaning: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigurationError(
            f"{parameter}={value!r} is invalid: expected a finite number > 0 ({meaning})"
        )
    return float(value)


def _check_burst(burst: object) -> int:
    if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
        raise ConfigurationError(
            f"burst={burst!r} is invalid: expected an integer >= 1 (calls admitted at once)"
        )
    return burst


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


def _default_backend(clock: Clock | None, backend: object) -> RateBackend:
    if backend is None:
        if clock is not None and not callable(clock):
            raise ConfigurationError(
                f"clock={clock!r} is invalid: expected a function returning monotonic seconds"
            )
        return MemoryBackend(clock)
    if clock is not None:
        raise ConfigurationError(
            "clock= applies to the default in-memory backend only: give the clock to the backend"
        )
    if not isinstance(backend, RateBackend):
        raise ConfigurationError(
            f"backend={backend!r} is invalid: expected a rate backend (async decide(requests))"
        )
    return backend


class RateLimiter:
    """One limit: ``rate`` calls per ``per`` seconds, bursts of up to ``burst`` calls.

    ``scope``: ``"global"`` (one budget), ``"tool"`` (one per tool), ``"client"`` (one per
    client across tools; calls with no known client share one), or a custom name with ``key``, a
    function ``CallContext -> str`` (``key`` may also replace a built-in scope's default, for
    example ``scope="client", key=lambda ctx: f"{ctx.client}/{ctx.tool}"`` for a budget per
    client per tool). ``name`` namespaces the limit's keys in the backend; the default is made
    from the scope and the figures. ``clock`` (monotonic seconds) is for the default in-memory
    backend; ``backend`` is where the state lives (default: a private in-memory one).
    """

    __slots__ = (
        "_backend",
        "_backend_given",
        "_clock",
        "_interval",
        "_key",
        "_namespace",
        "_prefix",
        "_tolerance",
        "_wait_one",
        "burst",
        "name",
        "per",
        "rate",
        "scope",
    )

    def __init__(
        self,
        rate: float,
        per: float = 1.0,
        burst: int = 1,
        *,
        scope: str = "global",
        key: KeyFunction | None = None,
        name: str | None = None,
        clock: Clock | None = None,
        backend: RateBackend | None = None,
    ) -> None:
        self.rate = _check_number("rate", rate, "calls per `per` seconds")
        self.per = _check_number("per", per, "the period in seconds")
        self.burst = _check_burst(burst)
        self.scope, self._key = _check_scope(scope, key)
        default = _default_name(self.scope, self.rate, self.per, self.burst)
        self.name = _check_name(name, default)
        self._namespace = self.name + ":"
        self._interval = self.per / self.rate
        self._tolerance = (self.burst - 1) * self._interval
        self._clock = clock
        self._backend_given = backend is not None
        self._backend = _default_backend(clock, backend)
        # A private backend holds this limit's keys only: they need no namespace.
        self._prefix = self._namespace if self._backend_given else ""
        # The in-memory backend's one-limit fast path, when the backend has it.
        self._wait_one: Callable[[str, float, float], float] | None = getattr(
            self._backend, "wait_one", None
        )

    def __setattr__(self, name: str, value: object) -> None:
        # Each attribute is set once, in __init__: a later change would leave the derived
        # interval, tolerance and namespace stale.
        if hasattr(self, name):
            raise AttributeError(f"RateLimiter.{name} is read-only: make a new RateLimiter")
        object.__setattr__(self, name, value)

    @property
    def backend(self) -> RateBackend:
        return self._backend

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

    @property
    def given_backend(self) -> RateBackend | None:
        """The backend this limit was explicitly given, if any (a composition must agree)."""
        return self._backend if self._backend_given else None

    @property
    def clock(self) -> Clock | None:
        """The clock this limit was given for its default in-memory backend, if any."""
        return self._clock

    def request(self, key: str = "") -> GcraRequest:
        """This limit's part of a backend decision for ``key``."""
        return (self._prefix + key, self._interval, self._tolerance)

    def try_acquire(self, key: str = "") -> RateDecision:
        """Decide now and record an admitted call; needs a synchronous (in-memory) backend."""
        wait_one = self._wait_one
        if wait_one is None:
            return _decision(_decide_now(self._backend)((self.request(key),)))
        wait = wait_one(self._prefix + key, self._interval, self._tolerance)
        return _ADMITTED if wait == 0.0 else RateDecision(False, wait)

    async def acquire(self, key: str = "") -> RateDecision:
        """Decide and record, with any backend (one round trip on Redis). Never waits for the
        limit: a refusal comes back at once with its ``retry_after``."""
        if self._wait_one is not None:
            return self.try_acquire(key)
        return _decision(await self._backend.decide((self.request(key),)))

    def __repr__(self) -> str:
        return (
            f"RateLimiter(rate={self.rate:g}, per={self.per:g}, burst={self.burst},"
            f" scope={self.scope!r}, name={self.name!r})"
        )


def _decision(result: GcraResult) -> RateDecision:
    return _ADMITTED if result.allowed else RateDecision(False, result.retry_after)


def _decide_now(backend: RateBackend) -> Callable[[Sequence[GcraRequest]], GcraResult]:
    if isinstance(backend, SyncRateBackend):
        return backend.decide_now
    raise ConfigurationError(
        f"{backend!r} decides asynchronously only: use `await acquire()` / `await acheck()`"
    )


class RateLimits:
    """Several limits decided together: a call passes only when every limit admits it.

    One backend decision per call, all or nothing, so a refusal by one limit never spends the
    others' budget. ``check(ctx)`` (in-memory backend) and ``await acheck(ctx)`` (any backend)
    return ``None`` when the call may run, else the :class:`~fusion_guard.RateLimited` to raise or
    answer with: its envelope names the tool and the refusing limit, never the caller's key.

    ``backend``: where the state lives. By default the backend the limiters were explicitly given
    (they must agree), else a new in-memory one on ``clock`` (or the limiters' common clock).
    """

    __slots__ = ("_backend", "_decide_now", "_hot", "_limiters", "_templates", "_wait_one")

    def __init__(
        self,
        limiters: Iterable[RateLimiter],
        *,
        backend: RateBackend | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._limiters = _check_limiters(limiters)
        self._backend, private = _shared_backend(self._limiters, backend, clock)
        # Keys are namespaced per limit, unless one limit has a private backend to itself.
        alone = private and len(self._limiters) == 1
        self._decide_now = (
            self._backend.decide_now if isinstance(self._backend, SyncRateBackend) else None
        )
        # Per limit, what the per-call path needs, without attribute look-ups.
        self._hot = tuple(
            (lim.key_function, "" if alone else lim.namespace, lim.emission_interval, lim.tolerance)
            for lim in self._limiters
        )
        # One limit in memory (the common case): the backend's one-limit path, no request list.
        self._wait_one: Callable[[str, float, float], float] | None = (
            getattr(self._backend, "wait_one", None) if len(self._hot) == 1 else None
        )
        self._templates: dict[str, tuple[RateLimitedTemplate, ...]] = {}

    @property
    def limiters(self) -> tuple[RateLimiter, ...]:
        return self._limiters

    @property
    def backend(self) -> RateBackend:
        return self._backend

    @property
    def is_sync(self) -> bool:
        """Whether :meth:`check` works (the backend decides without awaiting)."""
        return self._decide_now is not None

    def requests(self, ctx: CallContext) -> list[GcraRequest]:
        """Every limit's part of the decision for this call."""
        return [(prefix + key(ctx), t, tau) for key, prefix, t, tau in self._hot]

    def check(self, ctx: CallContext) -> RateLimited | None:
        """Decide now (in-memory backend): None when admitted (and recorded), else the refusal."""
        wait_one = self._wait_one
        if wait_one is not None:
            key, prefix, interval, tolerance = self._hot[0]
            wait = wait_one(prefix + key(ctx), interval, tolerance)
            return None if wait == 0.0 else self._refusal(ctx.tool, GcraResult(False, wait, 0))
        decide_now = self._decide_now or _decide_now(self._backend)  # the latter raises
        result = decide_now(self.requests(ctx))
        return None if result.allowed else self._refusal(ctx.tool, result)

    async def acheck(self, ctx: CallContext) -> RateLimited | None:
        """Decide with any backend (one round trip on Redis); may raise BackendError."""
        if self._decide_now is not None:
            return self.check(ctx)
        result = await self._backend.decide(self.requests(ctx))
        return None if result.allowed else self._refusal(ctx.tool, result)

    def _refusal(self, tool: str, result: GcraResult) -> RateLimited:
        templates = self._templates.get(tool) or self._prepare(tool)
        response = templates[result.refused].render(result.retry_after)
        return RateLimited(response, result.retry_after, self._limiters[result.refused].scope)

    def _prepare(self, tool: str) -> tuple[RateLimitedTemplate, ...]:
        templates = tuple(
            RateLimitedTemplate(tool, lim.rate, lim.per, lim.scope) for lim in self._limiters
        )
        if len(self._templates) < _MAX_CACHED_TOOLS:
            self._templates[tool] = templates
        return templates

    def __repr__(self) -> str:
        return f"RateLimits({list(self._limiters)!r}, backend={self._backend!r})"


def _check_limiters(limiters: Iterable[RateLimiter]) -> tuple[RateLimiter, ...]:
    result = tuple(limiters)
    names: set[str] = set()
    for limiter in result:
        if not isinstance(limiter, RateLimiter):
            raise ConfigurationError(
                f"limiters contains {limiter!r}: expected RateLimiter instances"
            )
        if limiter.name in names:
            raise ConfigurationError(
                f"two limits are named {limiter.name!r}: their keys would collide in the"
                " backend; give each a distinct name="
            )
        names.add(limiter.name)
    return result


def _shared_backend(
    limiters: tuple[RateLimiter, ...], backend: RateBackend | None, clock: Clock | None
) -> tuple[RateBackend, bool]:
    """The backend of a composition, and whether it is a private one made here."""
    given = [lim.given_backend for lim in limiters if lim.given_backend is not None]
    if backend is None and given:
        backend = given[0]
    if any(other is not backend for other in given):
        raise ConfigurationError(
            "the limits were given different backends: one decision needs one backend;"
            " pass the same backend= to every RateLimiter (or to RateLimits)"
        )
    if clock is None and backend is None:
        clocks = {id(lim.clock): lim.clock for lim in limiters if lim.clock is not None}
        if len(clocks) > 1:
            raise ConfigurationError("the limits were given different clocks: pass one clock=")
        clock = next(iter(clocks.values()), None)
    return _default_backend(clock, backend), backend is None
