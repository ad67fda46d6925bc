"""Where a tool's gate is assembled: once per tool, from the settings, one way down the layers.

A gate is everything one tool's calls go through: its limits (``ToolLimits``), its observer, its
slots (a ``ConcurrencyGuard`` deciding by a fixed or adaptive ``Limit``; with ``BACKEND=redis``
a ``DistributedConcurrencyGuard`` holding fleet leases), its rate limiter on the one rate backend
all tools share, and its failure policy for when that backend fails. ``GateAssembly.gate`` is the
only place these are chosen; the Guard's ``GateTable`` asks it once per tool and keeps the
result.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ._bounds import rate_problem
from ._clock import Clock, monotonic
from ._exceptions import ConfigurationError
from ._log import log_event
from ._observer import GuardObserver, Outcome, ShedReason, ToolObserver, bind_tool
from ._policy import PolicyTable, ToolLimits
from .admission._adaptive import GradientLimit
from .admission._concurrency import ConcurrencyGuard
from .admission._context import CallContext
from .admission._distributed import DistributedConcurrencyGuard
from .admission._rate import RateLimit, RateLimiter
from .admission._unbounded import Unbounded
from .backends._base import RateBackend
from .backends._memory import MemoryBackend

if TYPE_CHECKING:
    from .admission._failure import BackendFailure
    from .config._settings import GuardSettings

__all__ = ["NULL_OBSERVER", "OVERFLOW_TOOL", "Gate", "GateAssembly", "GateTable", "Slots"]

Slots = ConcurrencyGuard | DistributedConcurrencyGuard
"""A tool's slots: this process's, or this process's composed with a fleet lease."""

_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


class _NullObserver:
    """The observer of a guard nobody watches: every event costs one empty call."""

    __slots__ = ()

    def admitted(self, queue_wait: float) -> None:
        pass

    def shed(self, reason: ShedReason, active: int, queued: int, retry_after: float) -> None:
        pass

    def rate_limited(self, scope: str, retry_after: float, key: str | None = None) -> None:
        pass

    def finished(self, outcome: Outcome, duration: float | None) -> None:
        pass

    def backend_error(self, backend: str, allowed: bool) -> None:
        pass


NULL_OBSERVER = _NullObserver()


class Gate:
    """One tool's state, made on its first call: limits, observer, slots, and rate limits (which
    apply the tool's failure policy when the rate backend fails). ``clock``: monotonic seconds,
    for the durations the slots of a tool without a concurrency limit report."""

    __slots__ = (
        "admission",
        "context",
        "limits",
        "observer",
        "rates",
        "slots",
        "tool",
    )

    def __init__(
        self,
        limits: ToolLimits,
        observer: ToolObserver,
        slots: Slots | None,
        rates: RateLimiter | None,
        clock: Clock = monotonic,
    ) -> None:
        self.tool = limits.tool
        # The context of every call that names no client and no request, made once.
        self.context = CallContext(limits.tool)
        self.limits = limits
        self.observer = observer
        self.slots = slots
        self.rates = rates
        # Where every call takes its slot, the one owner of its deadline and reporter of its
        # end: the tool's slots, or slots that are always free when it has no concurrency limit.
        self.admission: Slots | Unbounded = (
            Unbounded(limits.tool, observer, clock) if slots is None else slots
        )


class GateAssembly:
    """Builds tools' gates from ``settings`` and the guard's ``observers``. ``rate_backend``:
    where every tool's rate limits live (default: chosen by ``settings.backend``, made on first
    use and shared, so that a ``global`` or ``client`` budget is really one). ``clock``: what
    the slots and the default in-memory backend read."""

    __slots__ = ("_clock", "_given", "_observers", "_rate_backend", "_settings")

    def __init__(
        self,
        settings: GuardSettings,
        observers: tuple[GuardObserver, ...],
        rate_backend: RateBackend | None,
        clock: Clock = monotonic,
    ) -> None:
        self._clock = clock
        self._settings = settings
        self._observers = observers
        self._rate_backend = rate_backend
        self._given = rate_backend  # the caller's to close, never this assembly's

    async def aclose(self, gates: Iterable[Gate]) -> None:
        """Close the Redis connections (and their lease refreshing) this assembly opened for
        ``gates``: the rate backend's it made, and those fleet slots made of their own; never a
        rate backend it was given, nor that backend's connection. A connection opens again
        when a later call needs it. Paced tools' timers stop at once (``stop_pacing``)."""
        for gate in gates:  # the pace timers first: they stop at once, nothing to await
            if isinstance(gate.slots, ConcurrencyGuard):
                gate.slots.stop_pacing()
        given = getattr(self._given, "connection", None)
        opened: dict[int, Any] = {}
        made = None if self._given is not None else self._rate_backend
        for connection in [getattr(made, "connection", None)] + [
            getattr(gate.slots, "connection", None) for gate in gates
        ]:
            if connection is not None and connection is not given:
                opened[id(connection)] = connection
        for connection in opened.values():
            await connection.aclose()

    def gate(self, limits: ToolLimits) -> Gate:
        """The gate of ``limits.tool``: call once per tool and keep it."""
        tool = limits.tool
        adaptive = self._adaptive_limit() if limits.max_active == "auto" else None
        initial = adaptive.limit if adaptive is not None else limits.max_active
        assert initial != "auto"  # for the type checker: "auto" became the adaptive limit
        bound = bind_tool(self._observers, tool, initial)
        observer: ToolObserver = NULL_OBSERVER if bound is None else bound
        slots = None
        if adaptive is not None or initial is not None:
            slots = self._slots(limits, bound, adaptive, initial)
            _watch(observer, slots)
        rates = None
        if limits.rate is not None:
            rates = self._rates(limits, self._failure(limits, observer, slots))
        return Gate(limits, observer, slots, rates, self._clock)

    def rate_backend(self) -> RateBackend:
        if self._rate_backend is None:
            self._rate_backend = _backend_for(self._settings, self._clock)
        return self._rate_backend

    def _slots(
        self,
        limits: ToolLimits,
        observer: ToolObserver | None,
        adaptive: GradientLimit | None,
        initial: int | None,
    ) -> Slots:
        settings = self._settings
        queue_timeout = math.inf if limits.queue_timeout is None else limits.queue_timeout
        local: dict[str, Any] = {
            "name": limits.tool,
            "lifo": limits.lifo,
            "fair": limits.fair_queueing,
            "max_active_per_client": limits.max_active_per_client,
            "priority_share": limits.priority_share,
            "overload_errors": limits.overload_errors,
            "observer": observer,
            "clock": self._clock,
        }
        if settings.backend != "redis" or settings.redis_url is None:
            if adaptive is not None:
                # The slot count follows the tool's latency; the default queue follows the
                # limit's estimate of the tool's parallelism.
                return ConcurrencyGuard(
                    limit=adaptive,
                    max_queue=limits.max_queue,
                    queue_timeout=queue_timeout,
                    **local,
                )
            assert initial is not None  # slots are made for a number or "auto"
            return ConcurrencyGuard(initial, limits.max_queue, queue_timeout, **local)
        # Fleet-wide slots: Redis leases, on the rate backend's connection when it is Redis.
        # Under "auto" the fleet's hard cap is the automatic limit's ceiling, and this
        # process's slots follow its own adaptive limit inside it.
        from .backends._redis_rate import RedisRateLimitBackend

        backend = self.rate_backend()
        redis: str | RedisRateLimitBackend = (
            backend
            if isinstance(backend, RedisRateLimitBackend)
            else settings.redis_url.get_secret_value()
        )
        fleet_cap = adaptive.max_limit if adaptive is not None else initial
        assert fleet_cap is not None  # slots are made for a number or "auto"
        return DistributedConcurrencyGuard(
            fleet_cap,
            limits.max_queue,
            queue_timeout,
            redis=redis,
            lease=settings.redis_lease,
            failure_policy=limits.failure_policy,
            timeout=settings.redis_timeout,
            connect_timeout=settings.redis_connect_timeout,
            prefix=settings.redis_prefix,
            limit=adaptive,
            **local,
        )

    def _adaptive_limit(self) -> GradientLimit:
        settings = self._settings
        return GradientLimit(
            min_limit=settings.auto_min_active,
            max_limit=settings.auto_max_active,
            initial_limit=settings.auto_initial_active,
        )

    def _rates(self, limits: ToolLimits, failure: BackendFailure | None) -> RateLimiter:
        assert limits.rate is not None  # for the type checker: rates are made for a rate
        problem = rate_problem(limits.rate, limits.rate_per, limits.burst)
        if problem is not None:  # patterns composed beyond what the settings checked
            raise ConfigurationError(
                f"the rate limit of tool {limits.tool!r} is invalid: {problem}"
            )
        burst = limits.burst or max(1, math.ceil(limits.rate))
        limit = RateLimit(
            limits.rate,
            limits.rate_per,
            burst,
            scope=limits.rate_scope,
            name=_limit_name(limits, burst),
        )
        # The tool's own failure policy, applied by its limiter where the backend fails (one
        # backend serves every tool, and each tool may have its own policy; "raise" in memory,
        # which does not fail).
        return RateLimiter(
            limits=(limit,),
            backend=self.rate_backend(),
            failure_policy="raise" if failure is None else failure,
        )

    def _failure(
        self, limits: ToolLimits, observer: ToolObserver, slots: Slots | None
    ) -> BackendFailure | None:
        """The tool's failure policy for its rate backend, made once (None in memory, which
        does not fail)."""
        backend = self.rate_backend()
        if isinstance(backend, MemoryBackend):
            return None
        from .admission._failure import backend_failure

        return backend_failure(limits.tool, limits.failure_policy, backend, observer, slots)


OVERFLOW_TOOL = "(other tools)"
"""The shared gate of names past the table's size that match no configured pattern."""


class GateTable:
    """A guard's gates, by tool name: made by ``assembly`` with the limits ``policies`` resolve,
    on a tool's first call, and kept. At most ``max_tools`` names get a gate of their own; past
    it, a new name shares the gate of the names that match the same configured patterns (so
    those patterns' limits still apply; ``OVERFLOW_TOOL`` when it matches none), and an exactly
    configured name always gets its own. ``made``: the gates of their own, which the Guard reads
    on every call before asking ``gate``."""

    __slots__ = ("_assembly", "_max_tools", "_overflow", "_policies", "made")

    def __init__(self, policies: PolicyTable, assembly: GateAssembly, max_tools: int) -> None:
        self._policies = policies
        self._assembly = assembly
        self._max_tools = max_tools
        self.made: dict[str, Gate] = {}
        self._overflow: dict[tuple[str, ...], Gate] = {}

    def gate(self, tool: str) -> Gate:
        """``tool``'s gate, made now if it is the tool's first call."""
        gate = self.made.get(tool)
        if gate is None:
            limits = self._policies.resolve(_check_tool(tool))
            if len(self.made) >= self._max_tools and tool not in limits.patterns:
                return self._overflow_gate(limits)
            gate = self.made[tool] = self._assembly.gate(limits)
        return gate

    def _overflow_gate(self, limits: ToolLimits) -> Gate:
        # Names invented faster than tools are written must not grow this table (or the metrics'
        # label sets) forever, nor lose their configured limits: names matching the same patterns
        # have the same limits, so they share one gate per set of patterns (bounded by the
        # configuration, not by what callers send).
        gate = self._overflow.get(limits.patterns)
        if gate is None:
            name = _overflow_name(limits.patterns)
            log_event(logging.WARNING, "tool_table_full", gate=name, max_tools=self._max_tools)
            gate = self._assembly.gate(dataclasses.replace(limits, tool=name))
            self._overflow[limits.patterns] = gate
        return gate

    async def aclose(self) -> None:
        """Close what the assembly opened for these gates (``GateAssembly.aclose``)."""
        await self._assembly.aclose([*self.made.values(), *self._overflow.values()])


def _overflow_name(patterns: tuple[str, ...]) -> str:
    # Each set of patterns has its own gate, so its name lists them all (most specific first).
    return f"(other tools matching {', '.join(reversed(patterns))})" if patterns else OVERFLOW_TOOL


def _check_tool(tool: object) -> str:
    if not isinstance(tool, str) or not tool:
        raise ConfigurationError(f"tool={tool!r} is invalid: expected a non-empty tool name")
    return tool


def _watch(observer: ToolObserver, slots: Slots) -> None:
    """Connect a tool's observer and slots: observers that show live figures (in-flight, queue
    depth) read them from the slots."""
    watch = getattr(observer, "watch", None)
    if callable(watch):
        watch(slots)


def _backend_for(settings: GuardSettings, clock: Clock) -> RateBackend:
    if settings.backend == "redis" and settings.redis_url is not None:
        from .backends._redis_rate import RedisRateLimitBackend

        return RedisRateLimitBackend(
            settings.redis_url.get_secret_value(),
            timeout=settings.redis_timeout,
            connect_timeout=settings.redis_connect_timeout,
            failure_policy=settings.redis_failure_policy,
            prefix=settings.redis_prefix,
        )
    return MemoryBackend(clock)


def _limit_name(limits: ToolLimits, burst: int) -> str:
    """A stable backend name for the budget: where the rate was set, scope and figures."""
    source = limits.rate_source
    if source:
        digest = hashlib.blake2b(source.encode(), digest_size=4).hexdigest()
        origin = f"{_NAME_UNSAFE.sub('_', source)[:80]}-{digest}"
    else:
        origin = "defaults"
    # repr is exact (1234567 and 1234568 stay apart); '+' in '1e+22' is not a name character.
    figures = _NAME_UNSAFE.sub("_", f"{limits.rate!r}/{limits.rate_per!r}")
    return f"{origin}/{limits.rate_scope}/{figures}/{burst}"
