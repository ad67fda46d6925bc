"""Rate limits: ``rate`` calls per ``per`` seconds with bursts of ``burst``, decided by GCRA.

Three separate pieces (as in the ``limits`` library): *what* is limited (a scope and a key
function turning a :class:`CallContext` into the caller's key), *how* it is decided (GCRA: one
theoretical arrival time per key, see ``backends/_base.py``), and *where* the state lives (a
backend: in memory by default, Redis for a fleet).

A refusal's ``retry_after`` is a promise: callers refused while a budget is exhausted are told
its successive openings, one emission interval apart, so a crowd that follows the advice comes
back spread out at the limit's pace instead of all at once (``backends/_base.py`` has the rule).

- :class:`RateLimit` describes one limit (rate, period, burst, scope): data, no state.
- :class:`RateLimiter` enforces one or several limits (say 100/s for the server and 10/s per
  client): a call passes only when all admit it, decided in one atomic backend step, and a
  refusal spends no limit's budget. ``try_acquire(key)`` decides at once (in-memory backend),
  ``await decide(key)`` at once with any backend, ``await acquire(key)`` waits for an opening;
  ``check(ctx)`` / ``await acheck(ctx)`` answer ``None`` (admitted) or the
  :class:`~fusion_guard.RateLimited` to raise, whose envelope never contains the caller's key.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar

import anyio

from .._checks import check_failure_policy
from .._clock import Clock
from .._exceptions import BackendError, ConfigurationError, RateLimited, ServerBusy
from .._keys import MAX_KEY_CHARS, bounded_key
from .._priority import DEFAULT_RANK
from .._setting_names import FailurePolicy
from ..backends._base import GcraRequest, GcraResult, RateBackend, SyncRateBackend
from ..backends._memory import MemoryBackend
from ..wire._shedding import RateLimitedTemplate
from ._context import CallContext
from ._rate_limit import SCOPES, KeyFunction, RateLimit, check_limits

if TYPE_CHECKING:
    from .._priority import Priority
    from ._failure import BackendFailure

__all__ = ["SCOPES", "KeyFunction", "RateDecision", "RateLimit", "RateLimiter", "RateLimits"]

_R = TypeVar("_R")

# Tool names come from the server's own registry, but do not let a flood of unknown names grow
# the envelope cache without bound: past this many tools, refusals are rendered uncached.
_MAX_CACHED_TOOLS = 4096


@dataclass(frozen=True, slots=True)
class RateDecision:
    """``allowed``; ``retry_after``: 0.0 when allowed, else the seconds until the opening
    promised to this caller (successive refusals are promised successive openings)."""

    allowed: bool
    retry_after: float


_ADMITTED = RateDecision(True, 0.0)


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
    """Enforces rate limits: one described in place, ``RateLimiter(10, per=1.0, burst=5)`` (the
    :class:`RateLimit` arguments), or several decided together, ``RateLimiter(limits=[...])``
    (say 100/s for the server and 10/s per client).

    A call passes only when every limit admits it, decided in one atomic backend step, so a
    refusal by one limit never spends the others' budget.

    - ``try_acquire(key)`` decides now (in-memory backend), ``await decide(key)`` with any
      backend: a :class:`RateDecision` at once, the call recorded when admitted. The same
      ``key`` is every limit's key.
    - ``await acquire(key)`` waits until the limits admit the call (as ``anyio`` locks do).
    - ``check(ctx)`` / ``await acheck(ctx)`` key each limit by its scope from the call's context
      and answer ``None`` (admitted) or the :class:`~fusion_guard.RateLimited` to raise, whose
      envelope names the tool and the refusing limit, never the caller's key.

    ``backend``: where the state lives (default: a private in-memory one on ``clock``, monotonic
    seconds). ``failure_policy``: what ``acheck`` and ``decide`` do when the backend fails
    (:class:`~fusion_guard.BackendError`): ``"open"`` admits the call, ``"closed"`` refuses it
    (``acheck`` raises :class:`~fusion_guard.ServerBusy` ``backend_unavailable``, ``decide``
    answers a refusal with the outage's ``retry_after``), both logged (sampled); ``"raise"``
    lets the error through. The default is the backend's own ``failure_policy`` (a
    :class:`~fusion_guard.RedisRateLimitBackend` has one), else ``"raise"``. The Guard gives
    each tool's limiter that tool's policy, made once with its observer and slots (a
    ``BackendFailure``), which it then applies.
    """

    __slots__ = ("_backend", "_clock", "_decide", "_decide_now", "_failure", "_failure_policy",
                 "_given", "_hot", "_limits", "_templates", "_wait_one")  # fmt: skip

    def __init__(
        self,
        rate: float | None = None,
        per: float = 1.0,
        burst: int = 1,
        *,
        scope: str = "global",
        key: KeyFunction | None = None,
        name: str | None = None,
        limits: Iterable[RateLimit] | None = None,
        backend: RateBackend | None = None,
        clock: Clock | None = None,
        failure_policy: FailurePolicy | Literal["raise"] | BackendFailure | None = None,
    ) -> None:
        if limits is None:
            if rate is None:
                raise ConfigurationError(
                    "rate=None is invalid: expected a finite number > 0 (calls per `per`"
                    " seconds), or limits=[RateLimit, ...]"
                )
            self._limits: tuple[RateLimit, ...] = (
                RateLimit(rate, per, burst, scope=scope, key=key, name=name),
            )
        elif rate is not None:
            raise ConfigurationError(
                "RateLimiter takes a rate (one limit) or limits=[...] (several), not both"
            )
        else:
            self._limits = check_limits(limits)
        self._given = backend is not None
        self._clock = clock
        self._backend = _default_backend(clock, backend)
        if failure_policy is None:
            failure_policy = getattr(self._backend, "failure_policy", "raise")
        # A tool's policy made whole (the Guard's), or one made per failure from the name.
        self._failure = None if isinstance(failure_policy, str) else failure_policy
        if self._failure is not None:
            failure_policy = self._failure.policy
        self._failure_policy = (
            "raise" if failure_policy == "raise" else check_failure_policy(failure_policy)
        )
        # Keys are namespaced per limit, unless one limit has a private backend to itself.
        alone = not self._given and len(self._limits) == 1
        self._decide_now = (
            _with_caller(self._backend.decide_now)
            if isinstance(self._backend, SyncRateBackend)
            else None
        )
        self._decide = _with_caller(self._backend.decide)
        # Per limit, what the per-call path needs, without attribute look-ups.
        self._hot = tuple(
            (lim.key_function, "" if alone else lim.namespace, lim.emission_interval, lim.tolerance)
            for lim in self._limits
        )
        # One limit in memory (the common case): the backend's one-limit path, no request list.
        self._wait_one: Callable[[str, float, float, str | None], float] | None = (
            getattr(self._backend, "wait_one", None) if len(self._hot) == 1 else None
        )
        self._templates: dict[str, tuple[RateLimitedTemplate, ...]] = {}

    @property
    def limits(self) -> tuple[RateLimit, ...]:
        """The limits enforced, in the order given."""
        return self._limits

    @property
    def limit(self) -> RateLimit:
        """The limit enforced, for a limiter of one (a ``ValueError`` names the count else)."""
        if len(self._limits) != 1:
            raise ValueError(f"this RateLimiter enforces {len(self._limits)} limits: see .limits")
        return self._limits[0]

    @property
    def backend(self) -> RateBackend:
        return self._backend

    @property
    def given_backend(self) -> RateBackend | None:
        """The backend this limiter was explicitly given, if any."""
        return self._backend if self._given else None

    @property
    def clock(self) -> Clock | None:
        """The clock this limiter was given for its default in-memory backend, if any."""
        return self._clock

    @property
    def failure_policy(self) -> FailurePolicy | Literal["raise"]:
        """What a backend failure does here: ``open``, ``closed`` or ``raise``."""
        return self._failure_policy

    @property
    def is_sync(self) -> bool:
        """Whether :meth:`check` and :meth:`try_acquire` work (the backend decides without
        awaiting)."""
        return self._decide_now is not None

    def requests(self, ctx: CallContext) -> list[GcraRequest]:
        """Every limit's part of the decision for this call."""
        return [(prefix + key(ctx), t, tau) for key, prefix, t, tau in self._hot]

    def _keyed(self, key: str) -> list[GcraRequest]:
        return [(prefix + key, t, tau) for _, prefix, t, tau in self._hot]

    def try_acquire(self, key: str = "") -> RateDecision:
        """Decide now and record an admitted call; needs a synchronous (in-memory) backend."""
        if len(key) > MAX_KEY_CHARS:  # a caller's key may be anything: keep a digest of it
            key = bounded_key(key)
        wait_one = self._wait_one
        if wait_one is not None:
            _, prefix, interval, tolerance = self._hot[0]
            wait = wait_one(prefix + key, interval, tolerance, None)
            return _ADMITTED if wait == 0.0 else RateDecision(False, wait)
        decide_now = self._decide_now or _decide_now(self._backend)  # the latter raises
        return _decision(decide_now(self._keyed(key), None))

    async def decide(self, key: str = "") -> RateDecision:
        """Decide and record, with any backend (one round trip on Redis). Never waits for the
        limit: a refusal comes back at once with its ``retry_after``."""
        if self._decide_now is not None:
            return self.try_acquire(key)
        key = bounded_key(key)
        try:
            return _decision(await self._decide(self._keyed(key), None))
        except BackendError as exc:
            refusal = self._backend_failed(exc, "")
        return _ADMITTED if refusal is None else RateDecision(False, refusal.retry_after or 0.0)

    async def acquire(self, key: str = "") -> None:
        """Wait until the limits admit a call for ``key`` and record it. Each refusal's
        ``retry_after`` is the opening promised to this caller, so the wait is that long, then
        the limits are asked again (another caller may have taken the opening meanwhile)."""
        while True:
            decision = await self.decide(key)
            if decision.allowed:
                return
            await anyio.sleep(decision.retry_after)

    def check(self, ctx: CallContext) -> RateLimited | None:
        """Decide now (in-memory backend): None when admitted (and recorded), else the refusal."""
        wait_one = self._wait_one
        if wait_one is not None:
            key, prefix, interval, tolerance = self._hot[0]
            wait = wait_one(prefix + key(ctx), interval, tolerance, ctx.client)
            return None if wait == 0.0 else self._refusal(ctx.tool, GcraResult(False, wait, 0))
        decide_now = self._decide_now or _decide_now(self._backend)  # the latter raises
        result = decide_now(self.requests(ctx), ctx.client)
        return None if result.allowed else self._refusal(ctx.tool, result)

    async def acheck(self, ctx: CallContext) -> RateLimited | None:
        """Decide with any backend (one round trip on Redis); may raise BackendError."""
        if self._decide_now is not None:
            return self.check(ctx)
        try:
            result = await self._decide(self.requests(ctx), ctx.client)
        except BackendError as exc:
            refusal = self._backend_failed(exc, ctx.tool, ctx.priority)
            if refusal is not None:
                raise refusal from exc
            return None
        return None if result.allowed else self._refusal(ctx.tool, result)

    def _backend_failed(
        self, exc: BackendError, tool: str, priority: Priority | None = None
    ) -> ServerBusy | None:
        """The failure policy: None admits; a ServerBusy refuses (reported under the call's
        ``priority``); ``raise`` re-raises."""
        if self._failure is not None:
            return self._failure.handle(exc, DEFAULT_RANK if priority is None else priority.rank)
        policy = self._failure_policy
        if policy == "raise":
            raise exc
        from ._failure import backend_failure  # the Redis side: loaded on first failure

        return backend_failure(tool or "rate limit", policy, self._backend).handle(exc)

    def _refusal(self, tool: str, result: GcraResult) -> RateLimited:
        templates = self._templates.get(tool) or self._prepare(tool)
        response = templates[result.refused].render(result.retry_after)
        return RateLimited(response, result.retry_after, self._limits[result.refused].scope)

    def _prepare(self, tool: str) -> tuple[RateLimitedTemplate, ...]:
        templates = tuple(
            RateLimitedTemplate(tool, lim.rate, lim.per, lim.scope) for lim in self._limits
        )
        if len(self._templates) < _MAX_CACHED_TOOLS:
            self._templates[tool] = templates
        return templates

    def __repr__(self) -> str:
        return f"RateLimiter(limits={list(self._limits)!r}, backend={self._backend!r})"


class RateLimits(RateLimiter):
    """``RateLimiter(limits=...)`` under the composition's former name: composes limits, and
    one-limit limiters (their limits, on the backend or clock they were given). Only the
    constructor differs."""

    __slots__ = ()

    def __init__(
        self,
        limiters: Iterable[RateLimit | RateLimiter],
        *,
        backend: RateBackend | None = None,
        clock: Clock | None = None,
    ) -> None:
        items = tuple(limiters)
        limits: list[RateLimit] = []
        backends: list[RateBackend] = []
        clocks: list[Clock] = []
        for item in items:
            if isinstance(item, RateLimiter):
                limits.extend(item.limits)
                if item.given_backend is not None:
                    backends.append(item.given_backend)
                if item.clock is not None:
                    clocks.append(item.clock)
            else:
                limits.append(item)
        if backend is None and backends:
            backend = backends[0]
        if any(other is not backend for other in backends):
            raise ConfigurationError(
                "the limits were given different backends: one decision needs one backend;"
                " pass one backend= to RateLimiter(limits=[...])"
            )
        if clock is None and backend is None and clocks:
            if any(other is not clocks[0] for other in clocks):
                raise ConfigurationError("the limits were given different clocks: pass one clock=")
            clock = clocks[0]
        super().__init__(limits=limits, backend=backend, clock=clock)


def _decision(result: GcraResult) -> RateDecision:
    return _ADMITTED if result.allowed else RateDecision(False, result.retry_after)


def _with_caller(decide: Callable[..., _R]) -> Callable[[Sequence[GcraRequest], str | None], _R]:
    """A backend's ``decide`` (or ``decide_now``) taking the caller, also when the backend was
    written before decisions had one (it then advises every caller as an anonymous one)."""
    try:
        takes_caller = "caller" in inspect.signature(decide).parameters
    except (TypeError, ValueError):  # no signature to read: call it as it always was
        takes_caller = False
    if takes_caller:
        return decide
    return lambda requests, caller: decide(requests)


def _decide_now(
    backend: RateBackend,
) -> Callable[[Sequence[GcraRequest], str | None], GcraResult]:
    if isinstance(backend, SyncRateBackend):
        return _with_caller(backend.decide_now)
    raise ConfigurationError(
        f"{backend!r} decides asynchronously only: use `await decide()` / `await acheck()`"
    )
