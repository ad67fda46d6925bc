"""The retrying call: send, read the answer, and retry a refusal after the server's advice while
the deadline, the attempts and the server's retry budget allow.

Time is the event loop's (``anyio.current_time``), the clock cancel scopes use: a deadline set
with ``anyio.fail_after`` around the call is the caller's deadline here too, and the waits run in
virtual time under a test clock. Waits are plain ``anyio.sleep``: a cancellation ends them at
once.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import anyio

from ..wire._client import FusionClientError
from ..wire._shedding import RETRY_NOW
from ._advice import FLAGGED, RETRYABLE_CODES, is_error, refusal_of
from ._budget import (
    AdaptiveThrottle,
    Budget,
    Counting,
    Pushback,
    shared_budget,
    shared_pushback,
    shared_throttle,
)
from ._observe import ClientObserver, StopReason, log_gave_up, log_retry, notify

__all__ = ["SHARED", "CallOutcome", "RetryCall", "Retrying", "ThrottledLocally"]

R = TypeVar("R")


class Shared:
    """The type of ``SHARED``."""

    def __repr__(self) -> str:
        return "SHARED"


SHARED: Final = Shared()
"""``Retrying(budget=SHARED)`` (the default): the process-wide budget of the ``server``."""


class ThrottledLocally(FusionClientError):
    """Client-side adaptive throttling refused a call before it was sent (code
    ``THROTTLED_LOCALLY``): the server has been refusing most of what this process sends."""


@dataclass(slots=True)
class CallOutcome(Generic[R]):
    """What a retrying call returned and why: ``result`` is the last answer (a success, an
    error, or the last refusal), ``stopped`` why it is the last (see ``StopReason``),
    ``attempts`` how many were sent, ``waited`` the seconds spent waiting between them and
    ``error`` the envelope of an error ``result`` (None for a success)."""

    result: R
    stopped: StopReason
    attempts: int
    waited: float
    error: FusionClientError | None


_READY, _OUT, _REFUSED, _DONE = 0, 1, 2, 3
"""A ``RetryCall``'s states: an attempt ready to send, the same handed out by the iterator, a
refusal waiting for ``retry``, the answer known."""


class RetryCall(Generic[R]):
    """One logical call driven step by step, for code that sends the attempts itself (its own
    session, transport or bookkeeping); ``Retrying.begin`` makes one. Each attempt is sent by
    the caller, its answer given to ``settle``; after a refusal, ``retry`` waits for the advice
    and says whether to send again::

        call = retrying.begin("search", deadline=5.0)
        async for attempt in call:
            result = await session.call_tool(
                "search", args, read_timeout_seconds=attempt.remaining,
                meta={ATTEMPT_META_KEY: attempt.number},
            )
            attempt.settle(result)
        outcome = call.outcome

    or, without the iterator (no coroutine of this class runs for an answer taken at once)::

        call = retrying.begin("search")
        while True:
            result = await send(call.number, call.remaining)
            if call.settle(result) or not await call.retry():
                break

    - ``number``: the attempt to send now (1 for the first); send it in the request's ``_meta``
      under ``ATTEMPT_META_KEY`` (a first attempt may go without it: the server reads none as 1).
    - ``remaining``: seconds left for it to answer (the call's deadline or read timeout; None
      when the call has no bound of its own): a timeout to give the send.
    - ``settle(result)``: the attempt's answer (an MCP tool result; ``TypeError`` otherwise):
      True when it is the call's answer (a success, an error that is no refusal), False for a
      refusal worth retrying (then ``retry``).
    - ``retry()``: waits for the refusal's advice and returns True when attempt ``number`` may
      be sent now; False when the refusal is the answer (the budget, the deadline, the
      attempts... ``outcome.stopped`` says which). Cancellation ends the wait at once.
    - ``outcome``: the ``CallOutcome`` once the answer is known (``RuntimeError`` before).

    What a send raises is the caller's: nothing is retried, and the call is simply left.
    A ``RetryCall`` is one call's: not shared between tasks, not reused.
    """

    # No __slots__: the fields a call that succeeds at once never sets are read from these
    # class defaults, so making one writes two fields (the success path's cost is measured in
    # attribute writes: docs/client-measured.md).
    number: int = 1
    remaining: float | None = None
    waited: float = 0.0
    _state: int = _READY
    _deadline: float = math.inf  # the call's own bounds (its deadline, the read timeout)
    _bound: StopReason = "deadline"  # which of them is ``_deadline``
    _error: FusionClientError | None = None  # the last refusal's envelope
    _until: float | None = None  # the waits' bound, the enclosing deadline's included
    _why: StopReason = "deadline"
    _result: R  # the last answer settled
    _stopped: StopReason  # why it is the call's (set with the state _DONE)

    def __init__(self, retrying: Retrying, tool: str) -> None:
        self._retrying = retrying
        self.tool = tool

    def settle(self, result: R) -> bool:
        """Attempt ``number``'s answer: True when it is the call's, False for a refusal to
        ``retry``."""
        if self._state > _OUT:
            raise RuntimeError(
                "RetryCall.settle: the attempt is settled already (retry() sends the next)"
            )
        self._result = result
        retrying = self._retrying
        # A result of a class known to carry the flag (the SDKs' results) is read here, without
        # a call: the path of most calls.
        failed = result.is_error if type(result) in FLAGGED else is_error(result)  # type: ignore[attr-defined]
        if not failed:
            accepted = retrying._on_accepted
            if accepted is not None:
                accepted()
            if retrying._retry_accepted is not None and self.number > 1:
                retrying._retry_accepted()
            self._state, self._stopped = _DONE, "ok"
            return True
        error = refusal_of(result)
        final = error is None or error.code not in RETRYABLE_CODES
        if retrying._budget_answers is not None:
            retrying._budget_answers.answered(refused=not final)
        throttle = retrying._throttle
        if throttle is not None:
            if final:
                throttle.accepted()
            else:
                throttle.refused()
        self._error = error
        if final:
            if retrying._retry_accepted is not None and self.number > 1:
                retrying._retry_accepted()
            self._state, self._stopped = _DONE, "ok" if error is None else "error"
            return True
        self._state = _REFUSED
        return False

    async def retry(self) -> bool:
        """After a refusal: wait for its advice and return True when attempt ``number`` may be
        sent now; False when the refusal is the call's answer."""
        if self._state != _REFUSED:
            raise RuntimeError("RetryCall.retry: no refusal to retry (settle an answer first)")
        retrying = self._retrying
        if self._until is None:
            # The caller's own cancel scopes bound the waits too; the attempts are bounded by
            # them already, so ``remaining`` stays the call's own bounds.
            enclosing = anyio.current_effective_deadline()
            self._until, self._why = self._deadline, self._bound
            if enclosing < self._deadline:
                self._until, self._why = enclosing, "deadline"
        until = self._until
        error = self._error
        assert error is not None  # settle keeps the refusal's envelope
        observer = retrying._observer
        stop = retrying._stop(error, self.tool, self.number, until, self._why)
        if not isinstance(stop, str):
            if observer is not None:
                notify(observer, "retrying", retrying.server, self.tool, error.code, stop)
            log_retry(retrying.server, self.tool, self.number, error.code, stop)
            await anyio.sleep(stop)
            self.waited += stop
            # Another call may have been told "not now" while this one slept: it holds too.
            stop = retrying._held(until) or 0.0
            if not isinstance(stop, str) and stop > 0:
                await anyio.sleep(stop)
                self.waited += stop
        if isinstance(stop, str):
            if observer is not None:
                notify(observer, "gave_up", retrying.server, self.tool, stop, self.number)
            log_gave_up(retrying.server, self.tool, stop, self.number, error.code)
            self._state, self._stopped = _DONE, stop
            return False
        self.number += 1
        if self._deadline != math.inf:
            self.remaining = self._deadline - anyio.current_time()
        retrying._sent(self)
        self._state = _READY
        return True

    @property
    def outcome(self) -> CallOutcome[R]:
        """What the call returned and why (``RuntimeError`` while it is still in progress)."""
        if self._state != _DONE:
            raise RuntimeError("RetryCall.outcome: the call has no answer yet")
        stopped = self._stopped
        error = None if stopped == "ok" else self._error  # (a refusal's, before a success)
        return CallOutcome(self._result, stopped, self.number, self.waited, error)

    def __aiter__(self) -> RetryCall[R]:
        return self

    async def __anext__(self) -> RetryCall[R]:
        state = self._state
        if state == _READY:
            self._state = _OUT
            return self
        if state == _REFUSED and await self.retry():
            self._state = _OUT
            return self
        if state == _OUT:
            raise RuntimeError("RetryCall: settle each attempt's answer before the next")
        raise StopAsyncIteration

    def __repr__(self) -> str:
        state = ("ready", "sent", "refused", "done")[self._state]
        return f"RetryCall({self.tool!r}, attempt={self.number}, {state})"


def _seconds(name: str, value: float, *, zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ValueError(f"{name} must be a number of seconds, got {value!r}")
    if value < 0 or (value == 0 and not zero):
        raise ValueError(f"{name} must be {'>= 0' if zero else '> 0'} seconds, got {value!r}")
    return float(value)


class Retrying:
    """Retries SERVER_BUSY and RATE_LIMITED refusals after their advice; nothing else.

    - ``server``: the name keying the process-wide retry budget (``shared_budget``) and the
      observer's labels.
    - ``max_attempts``: attempts per call, the first included (5, as gRPC's cap: the budget,
      not this, is what bounds the load retries add).
    - ``budget``: ``SHARED`` (the server's shared budget), a budget of your own
      (``RetryBudget``, ``TokenBucket``, any ``Budget``), or None for no budget beyond
      ``max_attempts``.
    - ``throttle``: ``SHARED`` (the server's shared ``AdaptiveThrottle``: client-side adaptive
      throttling, see ``default_throttle``), a throttle of your own, or None for none.
    - ``timeout``: seconds a whole call (its attempts and waits) may take, unless the call
      gives its own ``deadline``; an enclosing ``anyio.fail_after`` deadline counts as well.
    - ``max_wait``: the longest advice followed (a refusal advising longer goes back).
    - ``jitter``: a wait is the advised ``retry_after`` plus up to ``jitter`` x that (never
      earlier than the advice), so callers told the same time do not return together; for a
      RATE_LIMITED refusal, at most one emission interval of its limit (see ``_spread``). A
      call refused again after following the advice waits twice as long each time (while
      that still ends before its deadline): the advice did not foresee the calls that took
      the openings, and the budget pays for every retry.
    - Calls sharing a budget (the server's shared one, or this object's calls) share what the
      server said: after a refusal carrying ``retry_now`` =
      ``false`` no call's retry goes before its ``retry_after`` (the call that received it
      returns it at once); and the process's RATE_LIMITED retries of one tool go at most one
      per emission interval of the limit (a crowd of anonymous callers is told one opening).
    - ``backoff``, ``max_backoff``: for a refusal without advice, a wait drawn uniformly from 0
      to ``backoff`` x 2^(retry - 1), at most ``max_backoff`` ("full jitter").
    - ``observer``: a ``ClientObserver``; ``rng``: the jitter's random source (seed it in tests).
    """

    __slots__ = (
        "_admit_first",
        "_backoff",
        "_budget",
        "_budget_answers",
        "_jitter",
        "_max_attempts",
        "_max_backoff",
        "_max_wait",
        "_observer",
        "_on_accepted",
        "_pushback",
        "_random",
        "_retry_accepted",
        "_throttle",
        "_timeout",
        "plain",
        "server",
    )

    def __init__(
        self,
        *,
        server: str = "default",
        max_attempts: int = 5,
        budget: Budget | Shared | None = SHARED,
        throttle: AdaptiveThrottle | Shared | None = SHARED,
        timeout: float | None = None,
        max_wait: float = 30.0,
        jitter: float = 0.2,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        observer: ClientObserver | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
        if not isinstance(server, str) or not server:
            raise ValueError(f"server must be a non-empty str naming the server, got {server!r}")
        self.server = server
        self._max_attempts = max_attempts
        # What the server said is shared as the budget is: by every caller of the server's
        # shared budget, else by this object's calls only.
        self._budget: Budget | None
        if isinstance(budget, Shared):
            self._budget, self._pushback = shared_budget(server), shared_pushback(server)
        else:
            self._budget, self._pushback = budget, Pushback()
        self._throttle = shared_throttle(server) if isinstance(throttle, Shared) else throttle
        self._timeout = None if timeout is None else _seconds("timeout", timeout)
        self._max_wait = _seconds("max_wait", max_wait, zero=True)
        self._jitter = _seconds("jitter", jitter, zero=True)
        self._backoff = _seconds("backoff", backoff, zero=True)
        self._max_backoff = _seconds("max_backoff", max_backoff, zero=True)
        self._observer = observer
        self._random = rng or random.Random()
        self.plain = observer is None and self._timeout is None
        """No timeout or observer of its own: a call with no deadline or read timeout needs
        neither the clock nor a notification until it is refused."""
        # The counting on the path of every call that succeeds at once (``Counting``), its
        # parts kept here: each call reads them with no look-up more.
        counting = Counting(self._budget, self._throttle)
        self._admit_first = counting.admit_first
        """Counts a first attempt sent with no ``RetryCall`` (``plain``); False: held back."""
        self._on_accepted = counting.on_accepted
        """Counts an attempt answered with no refusal."""
        self._budget_answers = counting.answers
        """The budget when it is told of answers."""
        self._retry_accepted = counting.retry_accepted
        """Tells the budget a retry was answered with no refusal (``RetryBudget(refund=True)``;
        None for the others: nothing more on a call's path)."""

    @property
    def budget(self) -> Budget | None:
        """The retry budget in use (None: only ``max_attempts`` bounds retries)."""
        return self._budget

    @property
    def throttle(self) -> AdaptiveThrottle | None:
        """The client-side throttle in use (None: none)."""
        return self._throttle

    async def call(
        self,
        fn: Callable[..., Awaitable[R]],
        /,
        *args: Any,
        deadline: float | None = None,
        **kwargs: Any,
    ) -> R:
        """``await fn(*args, **kwargs)``, retried on refusals; the last answer. ``deadline``:
        seconds from now the whole call may take (> 0; it is not passed to ``fn``). ``fn`` must
        return an MCP tool result (``TypeError`` otherwise); what it raises is never retried."""
        return (await self.run(fn, *args, deadline=deadline, **kwargs)).result

    async def run(
        self,
        fn: Callable[..., Awaitable[R]],
        /,
        *args: Any,
        deadline: float | None = None,
        **kwargs: Any,
    ) -> CallOutcome[R]:
        """As ``call``, with the reason the answer is the last (a ``CallOutcome``)."""

        async def send(_attempt: int, _remaining: float | None) -> R:
            return await fn(*args, **kwargs)

        return await self.attempts(send, tool=getattr(fn, "__name__", "call"), deadline=deadline)

    async def attempts(
        self,
        send: Callable[[int, float | None], Awaitable[R]],
        *,
        tool: str,
        read_timeout: float | None = None,
        deadline: float | None = None,
    ) -> CallOutcome[R]:
        """The retry loop: ``send(attempt, remaining)`` makes attempt number ``attempt`` with at
        most ``remaining`` seconds left to answer (None: no bound). ``read_timeout``: the
        session's, a bound on the whole call like ``deadline`` (seconds from now)."""
        call: RetryCall[R] = self.begin(tool, deadline=deadline, read_timeout=read_timeout)
        while True:
            result = await send(call.number, call.remaining)
            if call.settle(result) or not await call.retry():
                return call.outcome

    def begin(
        self, tool: str, *, deadline: float | None = None, read_timeout: float | None = None
    ) -> RetryCall[Any]:
        """A call of ``tool`` about to send its first attempt, to drive step by step (see
        ``RetryCall``). ``deadline`` as for ``call``; ``read_timeout``: the session's, a bound
        on the whole call like ``deadline`` (seconds from now). Raises ``ThrottledLocally``
        when client-side throttling holds the call back (nothing is to be sent)."""
        call: RetryCall[Any] = RetryCall(self, tool)
        if self.plain and read_timeout is None and deadline is None:  # the path of most calls
            self.send_first()
            return call
        throttle = self._throttle
        if throttle is not None and not throttle.admit():
            raise self.held_back()
        timeout = (
            self._timeout if deadline is None else _seconds("deadline (seconds from now)", deadline)
        )
        # The clock is read only when a bound of the call's own needs its start (an enclosing
        # cancel scope's deadline is absolute, and read on the first refusal).
        if timeout is not None or read_timeout is not None:
            start = anyio.current_time()
            bound = math.inf if timeout is None else start + timeout
            if read_timeout is not None and start + read_timeout < bound:
                bound, call._bound = start + read_timeout, "read_timeout"
            call._deadline = bound
            call.remaining = bound - start
        self._sent(call)
        return call

    def send_first(self) -> None:
        """Count a first attempt about to be sent without a ``RetryCall`` (a ``plain`` call with
        no bound of its own). Raises ``ThrottledLocally`` when the throttle holds it back."""
        admit = self._admit_first
        if admit is not None and not admit():
            raise self.held_back()

    @property
    def first_attempt_counting(
        self,
    ) -> tuple[Callable[[], bool] | None, Callable[[], object] | None]:
        """The counting of a first attempt sent without a ``RetryCall``, for a caller that makes
        the checks itself (the wrappers: no Python frame of their own on the path of every
        call): of the attempt about to be sent (False: held back, raise ``held_back()``), and of
        an answer that is no refusal (an SDK result whose class is in ``FLAGGED`` and is no
        error); None where there is nothing to count."""
        return self._admit_first, self._on_accepted

    def held_back(self) -> ThrottledLocally:
        """The error a call held back by the throttle raises (nothing was sent)."""
        return ThrottledLocally(
            "THROTTLED_LOCALLY",
            f"not sent: {self.server!r} has been refusing most calls from this process",
        )

    def _sent(self, call: RetryCall[Any]) -> None:
        if self._observer is not None:
            notify(self._observer, "attempted", self.server, call.tool, call.number)
        if self._budget is not None:
            self._budget.sent(retry=call.number > 1)

    def _stop(
        self, error: FusionClientError, tool: str, attempt: int, deadline: float, bound: StopReason
    ) -> StopReason | float:
        """Why the refusal goes back now, or the seconds to wait before retrying it. The checks
        that cost the server nothing come first; the budget is drawn on only for a retry that
        will be sent."""
        now = anyio.current_time()
        pushback = self._pushback
        if error.details.get(RETRY_NOW) == "false":  # the server's pushback: no retry now
            # Told to every call sharing the budget, the last attempt's too: theirs hold until
            # the advised time.
            pushback.hold(now + (error.retry_after or 0.0))
            return "attempts" if attempt >= self._max_attempts else "server_said_later"
        if attempt >= self._max_attempts:
            return "attempts"
        if error.retry_after is not None and error.retry_after > self._max_wait:
            return "advice_too_long"
        wait = self._wait(error, attempt, deadline - now)
        if pushback.hold_until - now > wait:  # another call was told not to retry before then
            held = self._held(deadline)
            if isinstance(held, str):
                return held
            wait = held or wait
        paced = None
        interval = _interval(error) if error.code == "RATE_LIMITED" else None
        if interval is not None and error.retry_after is not None:
            # The process's retries take successive openings, one interval each, from the
            # advised one or the next one no other retry of the process has taken; each lands
            # anywhere within its own.
            opening = now + error.retry_after
            taken = pushback.paced_until.get(tool, -math.inf)
            if taken > opening:
                opening = taken
                # (never earlier than a hold the wait already includes)
                wait = max(wait, opening - now + self._random.random() * interval)
            paced = opening + interval
        if now + wait >= deadline:
            return bound
        # The throttle first: a retry it holds back must not spend the budget (held back
        # after drawing on it, retries drained the budget a later blip needed).
        if self._throttle is not None and not self._throttle.admit():
            return "throttled"
        if self._budget is not None and not self._budget.withdraw():
            return "budget"
        if paced is not None:
            pushback.paced_until[tool] = paced
        return wait

    def _held(self, deadline: float) -> StopReason | float | None:
        """How long a retry still holds for the server's "not now" told to a call sharing the
        budget (spread by the jitter, so the held retries do not all come back at its end);
        ``server_said_later`` when that ends past ``deadline``; None when nothing holds it."""
        now = anyio.current_time()
        held = self._pushback.hold_until - now
        if held <= 0:
            return None
        wait = held * (1.0 + self._random.random() * self._jitter)
        return "server_said_later" if now + wait >= deadline else wait

    def _wait(self, error: FusionClientError, retry: int, room: float) -> float:
        """The wait before retry number ``retry``. A SERVER_BUSY advice is an estimate (the
        openings it foresaw may go to calls arriving meanwhile): doubled for each refusal of the
        call after the first, while that leaves the retry, within ``room`` seconds (the time
        left), as long as the plain wait to be answered. A rate limit's is the opening it holds
        for the caller: followed as it is."""
        advice = error.retry_after
        if advice is None:
            ceiling = min(self._max_backoff, self._backoff * 2.0 ** (retry - 1))
            return ceiling * self._random.random()
        wait = advice + self._random.random() * _spread(error, advice * self._jitter)
        if error.code == "RATE_LIMITED":  # a promise: the opening is held until its time
            return wait
        stretched = wait * 2.0 ** (retry - 1)
        # The doubled wait must leave the retry as long to be answered as the plain one would.
        return stretched if stretched + wait < room else wait


def _interval(error: FusionClientError) -> float | None:
    """A RATE_LIMITED refusal's emission interval (``period_seconds / limit``), when its details
    give one."""
    try:
        interval = float(error.details["period_seconds"]) / float(error.details["limit"])
    except (KeyError, ValueError, ZeroDivisionError):
        return None
    return interval if 0 < interval < math.inf else None


def _spread(error: FusionClientError, default: float) -> float:
    """How far after the advice a retry may land. A rate limit tells the callers it refuses
    successive openings one emission interval (``period_seconds / limit``) apart: a retry
    anywhere within its own interval keeps its place, so the retries reach the limit as evenly
    as it admits them. Other advice is spread over ``jitter`` x the advice."""
    if error.code == "RATE_LIMITED":
        interval = _interval(error)
        if interval is not None:
            return min(interval, default)
    return default
