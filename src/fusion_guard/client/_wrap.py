"""``wrap``: a client session of either SDK whose ``call_tool`` retries refusals.

Neither SDK is imported to wrap one: the session in hand is recognised by its class's module,
and FastMCP's ``ToolError`` is imported only when a wrapped FastMCP call must raise one. Every
other attribute is the wrapped session's own, so the wrapper stands in for it.

Every retry carries its number in the request's ``_meta`` under ``ATTEMPT_META_KEY`` (2 for the
first retry), beside whatever ``meta`` the caller gives; a first attempt carries none (the
server reads a missing number as 1), so a call that succeeds at once sends the caller's
``meta`` as it is: validating one more ``_meta`` was about 1 % of an in-process SDK round trip,
half the wrapper's whole budget (docs/client-measured.md).

``call_tool`` takes one keyword more than the SDK's: ``deadline``, the seconds from now the whole
call (its attempts and waits) may take.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from typing import Any

from ..wire._meta import ATTEMPT_META_KEY
from ._advice import FLAGGED
from ._budget import AdaptiveThrottle, Budget
from ._observe import ClientObserver
from ._retrying import SHARED, CallOutcome, RetryCall, Retrying, Shared
from ._sdk import fastmcp_read_timeout, mcp_read_timeout

__all__ = ["ATTEMPT_META_KEY", "RetryingFastMCPClient", "RetryingSession", "wrap"]


def _with_attempt(meta: Any, attempt: int) -> Any:
    """The ``_meta`` of an attempt: the caller's as it is for the first, with the number added
    (in a dict of its own) for a retry."""
    if attempt == 1:
        return meta
    return {**meta, ATTEMPT_META_KEY: attempt} if meta else {ATTEMPT_META_KEY: attempt}


async def _finish(
    call: RetryCall[Any], send: Callable[[int, float | None], Awaitable[Any]]
) -> CallOutcome[Any]:
    """The retries of a call whose first attempt was refused."""
    while await call.retry():
        if call.settle(await send(call.number, call.remaining)):
            break
    return call.outcome


def _server_name(target: object) -> str:
    """The name the server gave itself at initialisation (all three clients expose it as
    ``server_info``), or one name per wrapped object when it is not known yet."""
    try:
        info = getattr(target, "server_info", None)
    except Exception:  # a client not connected yet may raise here rather than answer None
        info = None
    name = getattr(info, "name", None)
    if isinstance(name, str) and name:
        return name
    return f"{type(target).__name__}@{id(target):x}"


def _seconds_of(timeout: datetime.timedelta | float | None) -> float | None:
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return timeout


_Plain = tuple[Callable[[], bool] | None, Callable[[], object] | None, Any, Retrying]


class _Wrapper:
    __slots__ = ("_plain", "_session_timeout", "retrying", "wrapped")

    def __init__(self, wrapped: Any, retrying: Retrying) -> None:
        self.wrapped = wrapped
        self.retrying = retrying
        # Read once: a session's read timeout is set when it is made.
        self._session_timeout = self._own_timeout()
        # Nothing bounds a call unless it gives its own deadline or timeout. Then what its
        # first attempt needs is read in one access: each access to an attribute of this class
        # passes through its ``__getattr__`` hook, which no specialised load skips. Its parts:
        # ``Retrying.first_attempt_counting`` (called here: no frame of their own a call), the
        # session, the ``Retrying``.
        self._plain: _Plain | None = (
            (*retrying.first_attempt_counting, wrapped, retrying)
            if retrying.plain and self._session_timeout is None
            else None
        )

    def _own_timeout(self) -> float | None:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        if name in _Wrapper.__slots__:  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.wrapped!r}, server={self.retrying.server!r})"


class RetryingSession(_Wrapper):
    """The MCP SDK's ``ClientSession`` or ``Client`` with a retrying ``call_tool`` (the same
    signature plus ``deadline``, the same result). ``call_tool_outcome`` also says why the
    answer is the last."""

    __slots__ = ()

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        progress_callback: Any = None,
        *,
        meta: Any = None,
        deadline: float | None = None,
        **kwargs: Any,
    ) -> Any:
        # The first attempt is sent from here; the retry loop starts only after a refusal. A
        # call with no bound of its own (and no extra SDK option) makes no RetryCall unless it
        # is refused: its success costs two counting calls and one coroutine frame (the
        # overhead target, docs/client-measured.md).
        plain = self._plain
        if plain is not None and deadline is None and read_timeout_seconds is None and not kwargs:
            admit, accepted, wrapped, retrying = plain
            if admit is not None and not admit():  # (``Retrying.send_first``)
                raise retrying.held_back()
            result = await wrapped.call_tool(
                name,
                arguments,
                None,
                progress_callback,
                meta=meta,
            )
            # A result of a class known to carry the flag (the SDK's) that is no error is the
            # call's; anything else is settled below.
            if type(result) in FLAGGED and not result.is_error:
                if accepted is not None:
                    accepted()
                return result
            call: RetryCall[Any] = RetryCall(retrying, name)
        else:
            retrying = self.retrying
            bound = self._session_timeout if read_timeout_seconds is None else read_timeout_seconds
            call = retrying.begin(name, deadline=deadline, read_timeout=bound)
            remaining = call.remaining
            result = await self.wrapped.call_tool(
                name,
                arguments,
                read_timeout_seconds if remaining is None else remaining,
                progress_callback,
                meta=meta,
                **kwargs,
            )
        if call.settle(result):
            return result
        send = self._sender(name, arguments, read_timeout_seconds, progress_callback, meta, kwargs)
        return (await _finish(call, send)).result

    async def call_tool_outcome(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        progress_callback: Any = None,
        *,
        meta: Any = None,
        deadline: float | None = None,
        **kwargs: Any,
    ) -> CallOutcome[Any]:
        """``call_tool``'s answer in a ``CallOutcome``."""
        send = self._sender(name, arguments, read_timeout_seconds, progress_callback, meta, kwargs)
        bound = self._session_timeout if read_timeout_seconds is None else read_timeout_seconds
        return await self.retrying.attempts(send, tool=name, read_timeout=bound, deadline=deadline)

    def _own_timeout(self) -> float | None:
        return mcp_read_timeout(self.wrapped)

    def _sender(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        read_timeout_seconds: float | None,
        progress_callback: Any,
        meta: Any,
        kwargs: dict[str, Any],
    ) -> Callable[[int, float | None], Awaitable[Any]]:
        call_tool = self.wrapped.call_tool

        async def send(attempt: int, remaining: float | None) -> Any:
            return await call_tool(
                name,
                arguments,
                read_timeout_seconds if remaining is None else remaining,
                progress_callback,
                meta=_with_attempt(meta, attempt),
                **kwargs,
            )

        return send


class RetryingFastMCPClient(_Wrapper):
    """FastMCP's ``Client`` with a retrying ``call_tool`` (the same signature plus ``deadline``,
    the same result; a final error raises FastMCP's ``ToolError`` when ``raise_on_error``, as
    FastMCP does).
    ``call_tool_outcome`` never raises on an error result and says why the answer is the
    last; its ``result`` is FastMCP's parsed ``CallToolResult``."""

    __slots__ = ()

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        timeout: datetime.timedelta | float | None = None,  # noqa: ASYNC109  # FastMCP's own
        raise_on_error: bool = True,
        meta: dict[str, Any] | None = None,
        deadline: float | None = None,
        **kwargs: Any,
    ) -> Any:
        # As the MCP SDK's wrapper: no RetryCall for a call with no bound that succeeds.
        per_call = None if timeout is None else _seconds_of(timeout)
        plain = self._plain
        if plain is not None and deadline is None and per_call is None and not kwargs:
            admit, accepted, wrapped, retrying = plain
            if admit is not None and not admit():
                raise retrying.held_back()
            result = await wrapped.call_tool(
                name,
                arguments,
                raise_on_error=False,
                meta=meta,
            )
            if type(result) in FLAGGED and not result.is_error:
                if accepted is not None:
                    accepted()
                return result
            call: RetryCall[Any] = RetryCall(retrying, name)
        else:
            retrying = self.retrying
            bound = self._session_timeout if per_call is None else per_call
            call = retrying.begin(name, deadline=deadline, read_timeout=bound)
            remaining = call.remaining
            result = await self.wrapped.call_tool(
                name,
                arguments,
                timeout=timeout if remaining is None else remaining,
                raise_on_error=False,
                meta=meta,
                **kwargs,
            )
        if not call.settle(result):
            send = self._sender(name, arguments, per_call, meta, kwargs)
            result = (await _finish(call, send)).result
        if raise_on_error and result.is_error:
            from fastmcp.exceptions import ToolError

            content = result.content
            text = getattr(content[0], "text", None) if content else None
            raise ToolError(text if isinstance(text, str) else f"Tool '{name}' returned an error")
        return result

    async def call_tool_outcome(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        timeout: datetime.timedelta | float | None = None,  # noqa: ASYNC109  # FastMCP's own
        meta: dict[str, Any] | None = None,
        deadline: float | None = None,
        **kwargs: Any,
    ) -> CallOutcome[Any]:
        """``call_tool``'s answer in a ``CallOutcome`` (an error result is not raised)."""
        per_call = _seconds_of(timeout)
        send = self._sender(name, arguments, per_call, meta, kwargs)
        bound = self._session_timeout if per_call is None else per_call
        return await self.retrying.attempts(send, tool=name, read_timeout=bound, deadline=deadline)

    def _own_timeout(self) -> float | None:
        return fastmcp_read_timeout(self.wrapped)

    def _sender(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        per_call: float | None,
        meta: dict[str, Any] | None,
        kwargs: dict[str, Any],
    ) -> Callable[[int, float | None], Awaitable[Any]]:
        call_tool = self.wrapped.call_tool

        async def send(attempt: int, remaining: float | None) -> Any:
            return await call_tool(
                name,
                arguments,
                timeout=per_call if remaining is None else remaining,
                raise_on_error=False,
                meta=_with_attempt(meta, attempt),
                **kwargs,
            )

        return send


def wrap(
    session_or_client: Any,
    *,
    server: str | None = None,
    max_attempts: int = 5,
    budget: Budget | Shared | None = SHARED,
    throttle: AdaptiveThrottle | Shared | None = SHARED,
    timeout: float | None = None,
    max_wait: float = 30.0,
    observer: ClientObserver | None = None,
) -> Any:
    """``session_or_client`` (the MCP SDK's ``ClientSession`` or ``Client``, or FastMCP's
    ``Client``) with a ``call_tool`` that retries SERVER_BUSY and RATE_LIMITED refusals after
    their advice; see ``Retrying`` for the options. ``server`` keys the shared retry budget:
    by default the name the server gave at initialisation (wrap a connected session to share
    it), else a budget of the wrapped object's own."""
    if not callable(getattr(session_or_client, "call_tool", None)):
        raise TypeError(
            "wrap expects an MCP ClientSession or Client, or a FastMCP Client (something with"
            f" call_tool), got {type(session_or_client).__name__}"
        )
    retrying = Retrying(
        server=server or _server_name(session_or_client),
        max_attempts=max_attempts,
        budget=budget,
        throttle=throttle,
        timeout=timeout,
        max_wait=max_wait,
        observer=observer,
    )
    if type(session_or_client).__module__.partition(".")[0] == "fastmcp":
        return RetryingFastMCPClient(session_or_client, retrying)
    return RetryingSession(session_or_client, retrying)
