"""A concurrency guard's settings checked and its parts made: the limiter's assembly.

``ConcurrencyGuard(...)`` hands its arguments here once. Each is checked (a bad one raises
``ConfigurationError`` naming the setting and what is accepted), the defaults are filled in
(``max_queue`` from the slots, or from an adaptive limit's parallelism), and the parts of the
admission core are made and wired into the state they share (``docs/admission-core.md``): the
core, the refusals, the waiting and its queue, and under an adaptive limit what finished calls
teach it. The guard keeps what comes back (``Parts``) and composes nothing itself.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

from .._checks import check_bool, check_int, check_name, check_number, check_seconds
from .._exceptions import ConfigurationError
from .._observer import ToolObserver
from ._core import Core
from ._discipline import QueueDiscipline
from ._learning import LimitLearning, default_max_queue, parallelism_of
from ._limit import FixedLimit, Limit
from ._permit import Permit
from ._queue import Queue
from ._refusal import Refusals
from ._service_time import ServiceTimeEstimator
from ._waiting import Waiting

__all__ = ["Parts", "assemble", "check_overload_errors"]


@dataclass(frozen=True, slots=True)
class Parts:
    """What a guard keeps of its assembly: the shared ``core`` (wired to the other parts), its
    ``refusals``, and the settings it answers for (``adaptive``: the limit deciding the slots,
    None for a fixed number; ``fair``, ``per_client``, ``permit``, ``reports_finished``)."""

    core: Core
    refusals: Refusals
    adaptive: Limit | None
    fair: bool
    per_client: int | None
    permit: Permit | None
    reports_finished: bool
    learning: LimitLearning | None = None
    """What an adaptive limit's finished calls teach, and its pacing (None: a fixed limit)."""


def assemble(
    max_active: int | None,
    max_queue: int | None,
    queue_timeout: float,
    *,
    name: str,
    lifo: bool,
    standing_after: float | None,
    standing_limit: int | None,
    observer: ToolObserver | None,
    expected_service_time: float,
    max_retry_after: float,
    predictive: bool,
    clock: Callable[[], float],
    limit: Limit | None,
    permit: Permit | None,
    fair: bool,
    max_active_per_client: int | None,
    reports_finished: bool | None,
    priority_share: float,
    overload_errors: tuple[type[BaseException], ...],
) -> Parts:
    """The parts of a ``ConcurrencyGuard`` of these settings (its constructor's, as given)."""
    adaptive, slots = _limit_of(max_active, limit)
    overload_errors = check_overload_errors(overload_errors)
    fair = check_bool("fair", fair)
    per_client = _per_client_cap(max_active_per_client, adaptive, slots)
    if permit is not None and not isinstance(permit, Permit):
        raise ConfigurationError(
            f"permit={permit!r} is invalid: expected a Permit (async take(deadline)"
            " and async give_back(token))"
        )
    # Under an adaptive limit that estimates the tool's parallelism, a default queue follows
    # it; per slot in force, the wait of a full queue would grow with the limit's headroom.
    parallelism = parallelism_of(adaptive)
    if max_queue is not None:
        queue = check_int("max_queue", max_queue, 0)
    elif parallelism is None:
        queue = default_max_queue(slots)
    else:
        queue = default_max_queue(parallelism, adaptive=True)
    timeout = check_seconds("queue_timeout", queue_timeout, allow_inf=True)
    name = check_name(name)
    lifo = check_bool("lifo", lifo)
    if standing_after is not None:
        standing_after = check_seconds("standing_after", standing_after)
    if standing_limit is not None:
        standing_limit = check_int("standing_limit", standing_limit, 1)
    predictive = check_bool("predictive", predictive)
    prior = check_seconds("expected_service_time", expected_service_time)
    retry_cap = check_seconds("max_retry_after", max_retry_after)
    if not callable(clock):
        raise ConfigurationError(f"clock must be a callable returning seconds, got {clock!r}")
    reports = True
    if reports_finished is not None:
        warnings.warn(
            "ConcurrencyGuard(reports_finished=...) is deprecated: each call's slot reports"
            " its end, with the outcome its leaver hands it (Slot.leave(..., outcome))",
            DeprecationWarning,
            stacklevel=3,  # the caller of ConcurrencyGuard(...)
        )
        reports = check_bool("reports_finished", reports_finished)
    # Who is refused at arrival, judged late, or served next: decided there, enforced here.
    discipline = QueueDiscipline(
        queue_timeout=timeout,
        max_queue=queue,
        slots=slots,
        lifo=lifo,
        standing_after=standing_after,
        standing_limit=standing_limit,
        predictive=predictive,
        now=clock(),
    )
    core = Core(
        name=name,
        max_active=slots,
        max_queue=queue,
        queue_timeout=timeout,
        discipline=discipline,
        service=ServiceTimeEstimator(prior),
        observer=observer,
        clock=clock,
    )
    core.overload_errors = overload_errors
    if not reports:
        core.ends = None
    refusals = Refusals(core, retry_cap, per_client)
    waiting = Waiting(
        core,
        refusals,
        Queue(core, refusals),
        fair=fair,
        per_client=per_client,
        share=_share(priority_share),
    )
    core.wait, core.arrive = waiting.wait, waiting.arrive
    core.wait_as_client = waiting.wait_as_client
    core.timed_out = refusals.handler_timeout
    learning = None
    if adaptive is not None:
        follows = max_queue is None and hasattr(adaptive, "parallelism")
        learning = LimitLearning(core, refusals, adaptive, prior, follows)
        core.learn = learning.learn
    return Parts(core, refusals, adaptive, fair, per_client, permit, reports, learning)


def check_overload_errors(errors: object) -> tuple[type[BaseException], ...]:
    """``overload_errors``: a tuple of exception classes (empty: none named)."""
    if not isinstance(errors, tuple) or not all(
        isinstance(kind, type) and issubclass(kind, BaseException) for kind in errors
    ):
        raise ConfigurationError(
            f"overload_errors={errors!r} is invalid: expected a tuple of exception classes"
            " (the errors a tool raises when it is overloaded, e.g. (PoolExhausted,))"
        )
    return errors


def _share(share: object) -> float:
    value = check_number("priority_share", share, 0.0, "a share of the slots, at most 1")
    if value > 1.0:
        raise ConfigurationError(
            f"priority_share={share!r} is invalid: expected a finite number > 0 (a share of the"
            " slots, at most 1)"
        )
    return value


def _per_client_cap(cap: object, adaptive: Limit | None, max_active: int) -> int | None:
    if cap is None:
        return None
    value = check_int("max_active_per_client", cap, 1)
    if adaptive is None and value > max_active:
        raise ConfigurationError(
            f"max_active_per_client={value} is invalid: expected an integer from 1 to"
            f" max_active ({max_active})"
        )
    return value


def _limit_of(max_active: object, limit: object) -> tuple[Limit | None, int]:
    """(the adaptive limit or None, the initial slot count) from ``max_active`` / ``limit``."""
    if limit is None:
        if max_active is None:
            raise ConfigurationError(
                "ConcurrencyGuard needs max_active=<whole number >= 1> or limit=<a Limit>"
            )
        return None, check_int("max_active", max_active, 1)
    if max_active is not None:
        raise ConfigurationError(
            f"ConcurrencyGuard(max_active={max_active!r}, limit={limit!r}): give one of the two"
        )
    if not isinstance(limit, Limit):
        raise ConfigurationError(
            f"limit must be a Limit (a .limit property and on_sample(start, duration, inflight,"
            f" dropped)), got {limit!r}"
        )
    initial = check_int("limit.limit", limit.limit, 1)
    return (None if isinstance(limit, FixedLimit) else limit), initial
